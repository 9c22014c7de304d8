"""What a gateway says about itself on every poll, and how it is stored."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

__all__ = [
    "GatewayReport",
    "parse_gateway_id",
    "parse_version",
    "report_json",
]

#: The largest version number a report may name (Snapshot.version is an integer column).
MAX_VERSION = 2**31 - 1

_GATEWAY_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$")


@dataclass(frozen=True, slots=True)
class GatewayReport:
    """What one gateway said in its last poll."""

    gateway: str
    applied: int | None  #: the version it enforces (None before its first snapshot)
    rejected: int | None  #: a version it refused, if any
    reason: str  #: why it refused it
    seen: float  #: epoch seconds of the poll
    token: str  #: prefix of the token it used
    address: str  #: the address it polled from
    #: the scheduled version it rehearses beside the one it enforces (``docs/rehearsal.md``);
    #: None when it rehearses none (or predates rehearsals: older reports lack it)
    rehearsed: int | None = None

    def with_token(self, token: str) -> GatewayReport:
        return GatewayReport(
            self.gateway,
            self.applied,
            self.rejected,
            self.reason,
            self.seen,
            token,
            self.address,
            self.rehearsed,
        )


def parse_gateway_id(value: str) -> str:
    """Validate a ``Sluice-Gateway-Id``; raise ValueError saying what is allowed."""
    if not _GATEWAY_ID.match(value):
        raise ValueError("1 to 100 characters: letters, digits, '.', '_', ':' and '-'")
    return value


def parse_version(value: str) -> int:
    """Validate a version header (``Sluice-Applied-Version``...); ValueError unless it is
    a whole number from 1 to :data:`MAX_VERSION`."""
    if not (value.isascii() and value.isdigit() and len(value) <= 10):
        raise ValueError("must be a snapshot version number")
    version = int(value)
    if not 1 <= version <= MAX_VERSION:
        raise ValueError("must be a snapshot version number")
    return version


def report_json(report: GatewayReport) -> str:
    """The stored form of a report, as kept in the fleet hash."""
    return json.dumps({name: getattr(report, name) for name in GatewayReport.__slots__})
