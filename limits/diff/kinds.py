"""How one change of a diff moves a client's limits."""

from __future__ import annotations

from enum import StrEnum

__all__ = ["ChangeKind"]


class ChangeKind(StrEnum):
    """New, raised, lowered, removed, or changed (neither raised nor lowered)."""

    NEW = "new"
    RAISED = "raised"
    LOWERED = "lowered"
    REMOVED = "removed"
    CHANGED = "changed"
