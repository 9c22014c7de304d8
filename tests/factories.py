"""factory_boy factories of the rule models, one per model."""

from __future__ import annotations

import factory

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


class PolicyFactory(factory.django.DjangoModelFactory):
    """A policy with one limit (``limit__rate``, ``limit__burst``... to set it)."""

    class Meta:
        model = Policy
        skip_postgeneration_save = True

    scope = ScopeKind.DEFAULT
    route = None
    limit = factory.RelatedFactory(
        "tests.factories.LimitFactory", factory_related_name="policy"
    )


class LimitFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Limit

    policy = factory.SubFactory(PolicyFactory, limit=None)
    dimension = Dimension.TENANT
    rate = 10
    period = Period.SECOND
    burst = 20
