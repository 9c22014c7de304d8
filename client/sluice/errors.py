"""Exceptions raised by the enforcement client."""

from __future__ import annotations

__all__ = ["EnforcementError", "SnapshotError"]


class EnforcementError(Exception):
    """Base class of every error the enforcement client raises."""


class SnapshotError(EnforcementError):
    """A snapshot document that is malformed, inconsistent or fails its hash check."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = (
            path  #: where in the document, e.g. ``rules.policies[3].limits[0].burst``
        )
        self.message = message
