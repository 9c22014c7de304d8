"""Rule sets and users for the tests of the domain services."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from limits.audit import Actor
from limits.choices import Dimension, Role, ScopeKind
from limits.models import Limit, Policy
from tests.factories import PolicyFactory, RouteFactory, TenantFactory, TierFactory
from tests.limits.announce_fixtures import published  # noqa: F401  (fixture)
from tests.receiver import receiver  # noqa: F401  (fixture)


def default_policy() -> Policy:
    """The default policy for all routes (migrations create it; a flush may not)."""
    policy, created = Policy.objects.get_or_create(
        scope=ScopeKind.DEFAULT, route=None, expires_at=None
    )
    if created or not policy.limits.exists():
        Limit.objects.create(policy=policy, dimension=Dimension.IP, rate=10, burst=20)
    return policy


@pytest.fixture
def rules(db):
    """A small working copy: free and pro tiers, three tenants, two routes, four policies."""
    default_policy()
    free, pro = (
        TierFactory(slug="free", name="Free"),
        TierFactory(slug="pro", name="Pro"),
    )
    tenants = {
        "acme": TenantFactory(slug="acme", tier=pro),
        "globex": TenantFactory(slug="globex", tier=pro),
        "initech": TenantFactory(slug="initech", tier=free),
    }
    search = RouteFactory(slug="search", path_pattern="/v1/search")
    orders = RouteFactory(
        slug="orders.read", path_pattern="/v1/orders/{id}", methods=["GET"], cost=2
    )
    PolicyFactory(scope=ScopeKind.TIER, tier=free, limit__rate=5, limit__burst=10)
    pro_search = PolicyFactory(
        scope=ScopeKind.TIER, tier=pro, route=search, limit__rate=50, limit__burst=100
    )
    PolicyFactory(
        scope=ScopeKind.TENANT,
        tenant=tenants["globex"],
        route=search,
        limit__rate=2000,
        limit__burst=4000,
    )
    return {
        "free": free,
        "pro": pro,
        **tenants,
        "search": search,
        "orders": orders,
        "pro_search": pro_search,
    }


def _user(username: str, role: Role | None):
    users = get_user_model()
    if role is None:
        return users.objects.create_superuser(username, f"{username}@x.test", username)
    user = users.objects.create_user(
        username, f"{username}@x.test", username, is_staff=True
    )
    user.groups.add(Group.objects.get(name=role.value))
    return user


@pytest.fixture
def product(db):
    return _user("product", Role.PRODUCT)


@pytest.fixture
def support(db):
    return _user("support", Role.SUPPORT)


@pytest.fixture
def viewer(db):
    return _user("viewer", Role.VIEWER)


@pytest.fixture
def publisher(product):
    """The actor of a product user, who may publish."""
    return Actor(user=product, request_id="test-request", ip="127.0.0.1")
