"""Calendar quotas in a published version, and charges in the Redis gateways use.

The control plane's tables cannot hold a quota yet (another part of issue 26), so
the version is the working copy's rule set with a quota added to a policy and the
tenants' calendars set, stored as any publish stores it (``snapshot_store``).
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest
import redis

from limits.core.audit import Actor
from limits.publishing.services import publishing_lock, snapshot_store
from limits.rules.compiling import rules_compile
from sluice.model import Calendar, CalendarQuota, Dimension, period_bounds
from tests.servers import RedisServer

SYSTEM = Actor.system("test")
#: POSIX rules as the zones' TZif files end (the snapshot carries them)
ZONES = {"Europe/Paris": "CET-1CEST,M3.5.0,M10.5.0/3"}


def publish_quota(
    *,
    scope: str = "tier:free",
    limit: int = 1000,
    per: str = "month",
    cycle: str = "calendar",
    calendars: dict[str, Calendar] | None = None,
    name: str = "",
    shadow: bool = False,
):
    """Publish the working copy with a per-tenant quota added to ``scope``'s policy for
    every route; ``calendars``: tenant -> its zone and billing day."""
    rules = rules_compile()
    quota = CalendarQuota(Dimension.TENANT, limit, per, cycle, shadow=shadow, name=name)
    policies = tuple(
        replace(p, limits=(*p.limits, quota))
        if (p.scope, p.route, p.is_override) == (scope, "*", False)
        else p
        for p in rules.policies
    )
    calendars = calendars or {}
    zones = {c.zone: ZONES[c.zone] for c in calendars.values() if c.zone in ZONES}
    rules = replace(rules, policies=policies, calendars=calendars, zones=zones)
    publishing_lock(rules=True)
    return snapshot_store(actor=SYSTEM, rules=rules, message="quota")


def charge(
    client: redis.Redis,
    key: str,
    used: int,
    *,
    per: str = "month",
    cycle: str = "calendar",
    zone_rule: str = "UTC0",
    billing_day: int = 1,
    periods_ago: int = 0,
) -> int:
    """Write a quota's hash as the script leaves it: ``p`` the period's start (this
    period's, or an earlier one's), ``n`` what was used in it; return that start."""
    instant = int(time.time())
    for _ in range(periods_ago):
        instant = period_bounds(instant, per, cycle, zone_rule, billing_day)[0] - 1
    start = period_bounds(instant, per, cycle, zone_rule, billing_day)[0]
    client.hset(key, mapping={"p": start, "n": used})
    return start


@pytest.fixture
def redis_stopped(settings):
    """settings.REDIS_URL at a redis-server that answered once and is now stopped."""
    server = RedisServer().start()
    url = server.url
    server.stop()
    settings.REDIS_URL = url
    return url
