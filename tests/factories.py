"""factory_boy factories, one per model. They write rows directly (no audit): tests
of the services call the services."""

from __future__ import annotations

from datetime import timedelta

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import connection
from django.utils import timezone

from limits.choices import Dimension, FailureMode, Period, ScopeKind
from limits.models import Limit, Policy, Route, Tenant, Tier


class TierFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tier
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"tier-{n}")
    name = factory.LazyAttribute(lambda tier: tier.slug.title())


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"tenant-{n}")
    name = factory.LazyAttribute(lambda tenant: tenant.slug.title())
    tier = factory.SubFactory(TierFactory)


class RouteFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Route
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"route-{n}")
    methods = factory.LazyFunction(lambda: ["GET"])
    path_pattern = factory.LazyAttribute(lambda route: f"/v1/{route.slug}")
    cost = 1
    failure_mode = FailureMode.OPEN


def legacy_route(**fields) -> Route:
    """A route saved as before the database kept route claims (migration
    ``route_claims``): it may claim a method and path another route has."""
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE limits_route DISABLE TRIGGER limits_route_claims")
        try:
            return RouteFactory(**fields)
        finally:
            cursor.execute(
                "ALTER TABLE limits_route ENABLE TRIGGER limits_route_claims"
            )


class PolicyFactory(factory.django.DjangoModelFactory):
    """A policy with one limit (``limit__rate``, ``limit__burst``... to set it).

    The scope follows the subject: a tenant makes a tenant policy, a tier a tier
    policy, neither the default scope. ``override=True`` makes a live tenant override.
    """

    class Meta:
        model = Policy
        skip_postgeneration_save = True

    tier = None
    tenant = None
    route = None
    scope = factory.LazyAttribute(
        lambda p: (
            ScopeKind.TENANT
            if p.tenant
            else ScopeKind.TIER
            if p.tier
            else ScopeKind.DEFAULT
        )
    )
    limit = factory.RelatedFactory(
        "tests.factories.LimitFactory", factory_related_name="policy"
    )

    class Params:
        override = factory.Trait(
            tenant=factory.SubFactory(TenantFactory),
            reason="Launch week",
            expires_at=factory.LazyFunction(lambda: timezone.now() + timedelta(days=7)),
        )


class LimitFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Limit

    policy = factory.SubFactory(PolicyFactory, limit=None)
    dimension = Dimension.TENANT
    rate = 10
    period = Period.SECOND
    burst = 20


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)
        skip_postgeneration_save = True

    username = factory.Sequence(lambda n: f"user{n}")
    is_staff = True
    password = factory.django.Password("pw")

    @factory.post_generation
    def role(self, create, extracted, **kwargs):
        if create and extracted:
            self.groups.add(Group.objects.get(name=extracted))
