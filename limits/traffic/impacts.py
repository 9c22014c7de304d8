"""The impact estimates people read: the working copy's, and each scheduled version's.

Change requests estimate theirs in ``limits.changes.previews`` (a layer above);
both go through :func:`limits.traffic.estimate.impact_estimate`. A scheduled
version's estimate is read by every reminder of a fan-out and by the dashboards,
so it is kept in the cache for ``SLUICE_IMPACT_CACHE_SECONDS``, keyed by the
version and the active version it is judged against.
"""

from __future__ import annotations

from django.conf import settings
from django.core.cache import cache

from limits.diff.diffing import rules_diff
from limits.models import Snapshot
from limits.traffic.estimate import Impact, impact_estimate
from limits.versions.selectors import (
    ACTIVE,
    WORKING_COPY,
    rules_of,
    snapshot_get_active,
    snapshot_rules,
)

__all__ = ["scheduled_impact", "working_copy_impact"]


def working_copy_impact() -> Impact:
    """What publishing the working copy now would do to the traffic of the last days."""
    old, new = rules_of(ACTIVE), rules_of(WORKING_COPY)
    assert new is not None  # the working copy always compiles to rules
    return impact_estimate(old=old, new=new, diff=rules_diff(old, new))


def scheduled_impact(snapshot: Snapshot) -> Impact:
    """What scheduled version ``snapshot`` would do, judged against the active one on
    the traffic of the last days, as of its effective time (overrides expired by
    then count for no one); cached."""
    active = snapshot_get_active(light=True)
    # row ids, not version numbers: a version number is reused by a restored database
    key = f"impact:{snapshot.pk}:{snapshot.hash}:on:{active.pk if active else 0}"
    impact = cache.get(key)
    if impact is None:
        old, new = rules_of(ACTIVE), snapshot_rules(snapshot)
        at = snapshot.effective_at
        impact = impact_estimate(
            old=old, new=new, diff=rules_diff(old, new, at=at), at=at
        )
        cache.set(key, impact, settings.SLUICE_IMPACT_CACHE_SECONDS)
    return impact
