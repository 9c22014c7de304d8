"""Hypothesis strategies that build valid rule sets of any shape."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import strategies as st

from sluice import (
    ALL_ROUTES,
    DEFAULT_SCOPE,
    Dimension,
    Limit,
    Policy,
    Route,
    Rules,
)

NOW = datetime(2026, 12, 1, tzinfo=UTC)
slugs = st.text("abcdefgh", min_size=1, max_size=4)
limits = st.builds(
    Limit,
    dimension=st.sampled_from(list(Dimension)),
    rate=st.integers(1, 1000),
    period=st.sampled_from([1, 60, 3600, 86400]),
    burst=st.integers(10, 2000),
)


@st.composite
def rule_sets(draw) -> Rules:
    """A valid rule set: tiers, tenants on them, routes, and policies at random levels."""
    tiers = draw(st.lists(slugs, min_size=1, max_size=3, unique=True))
    tenants = draw(st.dictionaries(slugs, st.sampled_from(tiers), max_size=5))
    route_slugs = draw(st.lists(slugs, max_size=4, unique=True))
    routes = {slug: Route(slug, ("GET",), f"/{slug}", 1) for slug in route_slugs}
    scopes = [
        DEFAULT_SCOPE,
        *(f"tier:{t}" for t in tiers),
        *(f"tenant:{t}" for t in tenants),
    ]
    keys = draw(
        st.sets(
            st.tuples(
                st.sampled_from(scopes), st.sampled_from([ALL_ROUTES, *route_slugs])
            )
        )
    )
    keys.add((DEFAULT_SCOPE, ALL_ROUTES))
    policies = [Policy(scope, route, (draw(limits),)) for scope, route in sorted(keys)]
    for scope, route in sorted(keys):
        if scope.startswith("tenant:") and draw(st.booleans()):
            hours = draw(st.integers(-48, 48).filter(bool))
            policies.append(
                Policy(
                    scope,
                    route,
                    (draw(limits),),
                    expires_at=NOW + timedelta(hours=hours),
                )
            )
    return Rules(
        tiers={t: t.title() for t in tiers},
        tenants=tenants,
        routes=routes,
        policies=tuple(policies),
    )
