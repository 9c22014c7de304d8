"""Small rule sets and snapshots for the enforcement tests."""

from __future__ import annotations

from datetime import UTC, datetime

from sluice import (
    ALL_ROUTES,
    DEFAULT_SCOPE,
    ConcurrencyLimit,
    Dimension,
    FailureMode,
    Limit,
    Policy,
    Route,
    Rules,
    Snapshot,
)

PUBLISHED = datetime(2026, 1, 1, tzinfo=UTC)

#: The Redis timeout (s) of a limiter in a test about decisions: no call to a
#: healthy Redis takes that long, even on a loaded machine, so no decision is
#: degraded by accident (the client's default of 5 ms is for production, where
#: a slow Redis must not hold requests).
REDIS_TIMEOUT = 5.0

ROUTES = {
    "search": Route("search", ("GET",), "/v1/search", 1, FailureMode.OPEN),
    "orders.read": Route(
        "orders.read", ("GET",), "/v1/orders/{id}", 1, FailureMode.CLOSED
    ),
    "orders.create": Route(
        "orders.create", ("POST",), "/v1/orders", 2, FailureMode.LOCAL
    ),
}


def rules(*policies: Policy, routes=None, tenants=None) -> Rules:
    """Rules with tiers free and pro, tenants acme (pro) and globex (free), the three routes.

    ``policies`` come on top of a default all-routes policy of 1000 per second per
    IP (unless one of them is the default all-routes policy itself).
    """
    given = {(p.scope, p.route, p.is_override) for p in policies}
    base = ()
    if (DEFAULT_SCOPE, ALL_ROUTES, False) not in given:
        base = (
            Policy(DEFAULT_SCOPE, ALL_ROUTES, (limit(Dimension.IP, 1000, 1, 1000),)),
        )
    return Rules(
        tiers={"free": "Free", "pro": "Pro"},
        tenants={"acme": "pro", "globex": "free"} if tenants is None else tenants,
        routes=ROUTES if routes is None else routes,
        policies=base + tuple(policies),
    )


def limit(
    dimension,
    rate,
    period,
    burst,
    *,
    cost=None,
    shadow=False,
    shards=1,
    lease=0,
    lease_ms=1000,
) -> Limit:
    return Limit(
        Dimension(dimension), rate, period, burst, cost, shadow, shards, lease, lease_ms
    )


def concurrent(dimension, max_inflight, *, timeout=300, shadow=False):
    return ConcurrencyLimit(Dimension(dimension), max_inflight, timeout, shadow)


def policy(scope, route, *limits: Limit, expires_at=None, concurrency=()) -> Policy:
    return Policy(
        scope, route, tuple(limits), expires_at=expires_at, concurrency=concurrency
    )


def snapshot(rules_: Rules, *, version: int = 1, effective_at=PUBLISHED) -> Snapshot:
    return Snapshot.build(
        version=version,
        parent=version - 1 or None,
        published_at=PUBLISHED,
        effective_at=effective_at,
        rules=rules_,
    )
