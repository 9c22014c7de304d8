"""One tenant's share of a scheduled version's impact estimate, as customers read it.

Reminders (``limits.announcements.services``) and the tenant's private page
(``tenant_links.tenant_overview``) show the same figures: how many of the
tenant's requests of the last days the version would have rejected, route by
route. A tenant the estimate finds unhurt gets None: its notice says what
changes, and nothing about being limited.
"""

from __future__ import annotations

from typing import Any

from limits.traffic.estimate import Impact

__all__ = ["tenant_estimate"]


def tenant_estimate(impact: Impact, tenant: str) -> dict[str, Any] | None:
    """``tenant``'s figures in ``impact``, its routes hardest hit first; None when the
    new rules would have rejected none of its requests and no monthly quota is
    projected to reject some."""
    rows = [
        row
        for row in impact.for_tenant(tenant)
        if row.rejected_new or row.projected_over
    ]
    if not rows:
        return None
    return {
        "since": impact.since.isoformat(),
        "until": impact.until.isoformat(),
        "days": round(impact.days),
        "requests": sum(row.seen for row in impact.for_tenant(tenant)),
        "rejected": sum(row.rejected_new for row in rows),
        # each route as the API shows it, without the tenant's name
        "routes": [
            {key: value for key, value in row.to_json().items() if key != "tenant"}
            for row in rows
        ],
    }
