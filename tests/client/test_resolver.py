"""The resolver: the most specific live policy always wins, and nothing is unlimited."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice import (
    ALL_ROUTES,
    Level,
    Resolver,
    Rules,
    resolve,
    validate_rules,
)
from tests.client.strategies import NOW, rule_sets

SPECIFICITY = list(Level)


def _expected_winner(rules: Rules, tenant: str | None, route: str | None, now: float):
    """Brute force: scan every policy, keep the live ones that match, take the most specific."""
    tier = rules.tenants.get(tenant) if tenant else None
    best = None
    for policy in rules.policies:
        if not policy.is_live(now):
            continue
        kind, subject = policy.scope_kind.value, policy.subject
        if (kind == "tenant" and subject != tenant) or (
            kind == "tier" and (tier is None or subject != tier)
        ):
            continue
        if policy.route not in (ALL_ROUTES, route):
            continue
        level = {"tenant": 0, "tier": 2, "default": 4}[kind] + (
            policy.route == ALL_ROUTES
        )
        rank = (level, not policy.is_override)
        if best is None or rank < best[0]:
            best = (rank, policy)
    return best[1] if best else None


# No deadline: Hypothesis fails an example slower than 200 ms by default, which a
# loaded machine makes of any example; what is checked is the answer, not its speed.
@settings(deadline=None)
@given(rules=rule_sets(), data=st.data())
def test_resolve__any_rules__most_specific_live_policy_wins(rules, data):
    # Given a valid rule set and any tenant (known or not) and route (known or not)
    assert validate_rules(rules) == []
    tenant = data.draw(st.sampled_from([None, "zzz", *rules.tenants]))
    route = data.draw(st.sampled_from([None, "zzz", *rules.routes]))
    now = (NOW + timedelta(hours=data.draw(st.integers(-72, 72)))).timestamp()
    # When resolving
    resolution = resolve(rules, tenant=tenant, route=route, now=now)
    # Then the winner is what a brute-force scan finds, and it is never missing
    known_route = route if route in rules.routes else None
    assert resolution.policy == _expected_winner(rules, tenant, known_route, now)
    assert resolution.policy.limits
    assert all(
        SPECIFICITY.index(c.level) >= SPECIFICITY.index(resolution.level)
        for c in resolution.beaten
    )


@settings(deadline=None)  # as above
@given(rules=rule_sets(), data=st.data())
def test_resolve__every_tenant_and_route__resolves_to_an_enforcing_policy(rules, data):
    # Given any rule set / When resolving every tenant on every route, far in the future
    resolver = Resolver(rules)
    later = (NOW + timedelta(days=365)).timestamp()
    for tenant in [None, *rules.tenants]:
        for route in [None, *rules.routes]:
            # Then a policy with at least one limit that is not shadow applies
            policy = resolver.resolve(tenant=tenant, route=route, now=later).policy
            assert any(not limit.shadow for limit in policy.limits)
            assert not policy.is_override  # every override has expired by then


def test_resolve__expired_override__falls_back_and_says_so(rules_with_override):
    # Given a tenant override that expired an hour ago
    rules, expires_at = rules_with_override
    # When resolving after it expired
    resolution = resolve(
        rules, tenant="acme", route="search", now=expires_at.timestamp() + 3600
    )
    # Then the tier policy applies and the expired override is named
    assert resolution.policy.scope == "tier:pro"
    assert [c.policy.is_override for c in resolution.expired] == [True]
    assert "expired and ignored" in resolution.why()


def test_resolve__live_override__beats_permanent_tenant_policy(rules_with_override):
    rules, expires_at = rules_with_override
    resolution = resolve(
        rules, tenant="acme", route="search", now=expires_at.timestamp() - 1
    )
    assert resolution.policy.is_override
    assert resolution.level == Level.TENANT_ROUTE
    assert "tier pro · search" in resolution.why()


def test_resolver__rules_without_default__refuses_instead_of_admitting():
    empty = Rules(tiers={}, tenants={}, routes={}, policies=())
    with pytest.raises(LookupError):
        resolve(empty, tenant=None, route=None)
