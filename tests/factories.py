"""factory_boy factories, one per rule model. Factories write rows directly (no audit):
tests of the services call the services."""

from datetime import timedelta

import factory
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.utils import timezone

from limits.choices import Dimension, FailureMode, Period, ScopeKind
from limits.models import Limit, Policy, Route, Tenant, Tier


class TierFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tier
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"tier{n}")
    name = factory.LazyAttribute(lambda o: o.slug.title())


class TenantFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Tenant
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"tenant{n}")
    name = factory.LazyAttribute(lambda o: o.slug.title())
    tier = factory.SubFactory(TierFactory)
    contact_emails = factory.LazyAttribute(lambda o: [f"ops@{o.slug}.example"])


class RouteFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Route
        django_get_or_create = ("slug",)

    slug = factory.Sequence(lambda n: f"route{n}")
    methods = factory.LazyFunction(lambda: ["GET"])
    path_pattern = factory.LazyAttribute(lambda o: f"/v1/{o.slug.replace('.', '/')}")
    cost = 1
    failure_mode = FailureMode.OPEN


class PolicyFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Policy

    scope = ScopeKind.TIER
    tier = factory.SubFactory(TierFactory)
    tenant = None
    route = None

    class Params:
        override = factory.Trait(
            scope=ScopeKind.TENANT,
            tier=None,
            tenant=factory.SubFactory(TenantFactory),
            reason="Launch week",
            expires_at=factory.LazyFunction(lambda: timezone.now() + timedelta(days=7)),
        )


class LimitFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Limit

    policy = factory.SubFactory(PolicyFactory)
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
