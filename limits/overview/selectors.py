"""The home page's panels: the active version, change requests waiting (and waiting
for you), scheduled versions, the fleet, the most-limited tenants of the last
hour, and overrides about to expire.

Each panel is one selector of the package that owns it; the Redis-backed fleet
shows as unavailable rather than failing the page when Redis does not answer.
"""

from __future__ import annotations

import logging
from collections import Counter
from datetime import timedelta

from django.utils import timezone
from redis.exceptions import RedisError

from limits.changes.overrides import overrides_expiring
from limits.changes.previews import change_requests_live, change_requests_waiting_for
from limits.choices import Role
from limits.core.audit import Actor
from limits.core.roles import user_role
from limits.gateways.fleet import GatewayState, fleet_status
from limits.models import Snapshot
from limits.traffic.dashboards import most_limited_tenants
from limits.traffic.rehearsal import rehearsal_totals
from limits.versions.selectors import snapshot_get_active, snapshot_scheduled

__all__ = ["home_context"]

log = logging.getLogger(__name__)

#: How the fleet's states read on the home page, in order.
FLEET_STATES = [
    (GatewayState.IN_SYNC, "in sync"),
    (GatewayState.UPDATING, "updating"),
    (GatewayState.STALE, "stale"),
    (GatewayState.SILENT, "silent"),
    (GatewayState.ERROR, "rejecting"),
]


def home_context(request) -> dict:
    """The panels of the home page for the person signed in (nothing without a role),
    as the template context ``{"home": {...}}``."""
    if user_role(request.user) is None:
        return {}
    actor = Actor.from_request(request)
    now = timezone.now()
    active = snapshot_get_active(light=True)
    return {
        "home": {
            "active": active,
            "scheduled": _scheduled(now),
            "waiting": change_requests_waiting_for(actor)[:8],
            "live": change_requests_live().count(),
            "fleet": _fleet(active),
            "limited": most_limited_tenants(since=now - timedelta(hours=1), top=5),
            "expiring": list(overrides_expiring(now=now)[:10]),
            "may_renew": user_role(request.user) in (Role.PRODUCT, Role.SUPPORT),
            "now": now,
        }
    }


def _scheduled(now) -> list[tuple[Snapshot, dict | None]]:
    """The next scheduled versions, each with what the gateways' rehearsal of it
    saw in the last day (None before any rehearsal: ``docs/rehearsal.md``)."""
    rows = list(
        snapshot_scheduled()
        .defer("content", "content_gzip", "diff")
        .select_related("announcement")[:5]
    )
    totals = rehearsal_totals(
        versions=[row.version for row in rows], since=now - timedelta(days=1)
    )
    return [(row, totals.get(row.version)) for row in rows]


def _fleet(active: Snapshot | None) -> dict | None:
    """Gateways per state; None when Redis (where reports live) does not answer."""
    try:
        fleet = fleet_status(
            active_version=active.version if active else None,
            active_since=active.activated_at.timestamp() if active else None,
        )
    except RedisError as exc:
        log.warning("home.fleet_unavailable %s", exc)
        return None
    counts = Counter(status.state for status in fleet.gateways)
    return {
        "total": len(fleet.gateways),
        "states": [
            (label, counts.get(state, 0), state) for state, label in FLEET_STATES
        ],
        "troubled": counts[GatewayState.STALE]
        + counts[GatewayState.SILENT]
        + counts[GatewayState.ERROR],
    }
