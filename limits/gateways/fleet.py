"""The fleet: which gateway runs which snapshot version, as the gateways report it on each poll.

Reports live in one Redis hash (``keys.FLEET_KEY``, gateway id -> JSON), so a
poll costs one HSET and no database write. The Fleet page and the API read it and
judge each gateway against the active version.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass, field
from enum import StrEnum

from django.conf import settings

from limits.core.store import redis_client
from limits.gateways.keys import FLEET_KEY
from limits.gateways.reports import GatewayReport
from limits.gateways.window import poll_window_flush

__all__ = [
    "FleetStatus",
    "GatewayState",
    "fleet_status",
]

#: Gateways not heard from for this long are dropped from the fleet.
FORGET_AFTER_SECONDS = 7 * 86400


class GatewayState(StrEnum):
    IN_SYNC = "in sync"  #: runs the active version
    UPDATING = "updating"  #: behind, but the active version is recent
    STALE = "stale"  #: behind the active version for longer than the threshold
    ERROR = "error"  #: reports a version it rejected
    SILENT = "silent"  #: has not polled for longer than the threshold


@dataclass(frozen=True, slots=True)
class GatewayStatus:
    report: GatewayReport
    state: GatewayState


@dataclass(frozen=True, slots=True)
class FleetStatus:
    active_version: int | None
    gateways: list[GatewayStatus]
    versions: dict[int | None, int]  #: version -> how many gateways run it
    #: scheduled version -> the gateways rehearsing it (not silent ones), by id
    rehearsals: dict[int, list[str]] = field(default_factory=dict)


def fleet_reports() -> list[GatewayReport]:
    """Every gateway's latest report; forgets the ones gone for a week."""
    poll_window_flush()  # this process's buffered reports first
    raw = redis_client().hgetall(FLEET_KEY)
    reports = [GatewayReport(**json.loads(value)) for value in raw.values()]
    forgotten = [
        r.gateway for r in reports if time.time() - r.seen > FORGET_AFTER_SECONDS
    ]
    if forgotten:
        redis_client().hdel(FLEET_KEY, *forgotten)
    return sorted(
        (r for r in reports if r.gateway not in forgotten), key=lambda r: r.gateway
    )


def fleet_status(
    *, active_version: int | None, active_since: float | None, now: float | None = None
) -> FleetStatus:
    """Judge every gateway against the active version (activated at ``active_since``)."""
    now = time.time() if now is None else now
    statuses = [
        GatewayStatus(report, _state(report, active_version, active_since, now))
        for report in fleet_reports()
    ]
    versions = Counter(status.report.applied for status in statuses)
    return FleetStatus(
        active_version,
        statuses,
        dict(sorted(versions.items(), key=_version_order)),
        _rehearsals(statuses),
    )


def _rehearsals(statuses: list[GatewayStatus]) -> dict[int, list[str]]:
    rehearsals: dict[int, list[str]] = {}
    for status in statuses:  # sorted by gateway id already
        version = status.report.rehearsed
        if version is not None and status.state is not GatewayState.SILENT:
            rehearsals.setdefault(version, []).append(status.report.gateway)
    return dict(sorted(rehearsals.items()))


def _version_order(item: tuple[int | None, int]) -> tuple[int, int]:
    version, _ = item
    return (-1 if version is None else version, 0)


def _state(
    report: GatewayReport, active: int | None, since: float | None, now: float
) -> GatewayState:
    if now - report.seen > settings.SLUICE_FLEET_SILENT_AFTER:
        return GatewayState.SILENT
    if report.rejected is not None or report.reason:
        return GatewayState.ERROR
    if active is None or (report.applied is not None and report.applied >= active):
        return GatewayState.IN_SYNC
    behind_for = now - (since if since is not None else report.seen)
    return (
        GatewayState.STALE
        if behind_for > settings.SLUICE_FLEET_STALE_AFTER
        else GatewayState.UPDATING
    )
