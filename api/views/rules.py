"""CRUD for tiers, tenants, routes, policies and limits; every write goes through limits.rules.services."""

from django.db.models import Prefetch
from drf_spectacular.utils import extend_schema
from rest_framework.decorators import action
from rest_framework.response import Response

from api.exceptions import StoreUnavailable
from api.filters import LimitFilter, PolicyFilter, RouteFilter, TenantFilter
from api.serializers.quotas import TenantUsageSerializer
from api.serializers.rules import (
    LimitSerializer,
    PolicySerializer,
    RouteSerializer,
    TenantSerializer,
    TierSerializer,
)
from limits.models import Limit, Policy, Route, Tenant, Tier
from limits.quotas.usage import tenant_quotas
from limits.rules import services as rules

from .base import ManagementViewSet, actor_from


class RuleObjectViewSet(ManagementViewSet):
    """Tiers, tenants and routes: saved and deleted by ``rules.rule_save`` / ``rule_delete``."""

    lookup_field = "slug"
    lookup_value_regex = r"[a-z0-9][a-z0-9._-]*"
    ordering_fields = ("slug", "created_at", "updated_at")

    def perform_create(self, serializer):
        obj = self.queryset.model(**serializer.validated_data)
        serializer.instance = rules.rule_save(obj=obj, actor=actor_from(self.request))

    def perform_update(self, serializer):
        obj = serializer.instance
        for name, value in serializer.validated_data.items():
            setattr(obj, name, value)
        rules.rule_save(
            obj=obj,
            actor=actor_from(self.request),
            expected_revision=self.expected_revision(),
        )

    def perform_destroy(self, instance):
        rules.rule_delete(
            obj=instance,
            actor=actor_from(self.request),
            expected_revision=self.expected_revision(),
        )


class TierViewSet(RuleObjectViewSet):
    queryset = Tier.objects.all()
    serializer_class = TierSerializer
    filterset_fields = ("slug",)
    search_fields = ("slug", "name")


class TenantViewSet(RuleObjectViewSet):
    queryset = Tenant.objects.select_related("tier")
    serializer_class = TenantSerializer
    filterset_class = TenantFilter
    search_fields = ("slug", "name")

    @extend_schema(
        operation_id="tenant_usage",
        responses={200: TenantUsageSerializer},
        description="The tenant's calendar quotas in the active version (those that "
        "count per account), each with what it used this period, read from the Redis "
        "gateways charge. 503 when Redis does not answer: usage is never guessed.",
    )
    @action(detail=True, methods=["get"])
    def usage(self, request, slug=None):
        tenant = self.get_object()
        report = tenant_quotas(tenant=tenant.slug)
        if report.unavailable:
            raise StoreUnavailable(report.unavailable)
        body = {
            "tenant": tenant.slug,
            "version": report.version,
            "quotas": [quota.to_json() for quota in report.quotas],
        }
        return Response(TenantUsageSerializer(body).data)


class RouteViewSet(RuleObjectViewSet):
    queryset = Route.objects.all()
    serializer_class = RouteSerializer
    filterset_class = RouteFilter
    search_fields = ("slug", "path_pattern", "description")


class PolicyViewSet(ManagementViewSet):
    """Policies with their limits, written whole by ``rules.policy_save``."""

    queryset = (
        Policy.objects.select_related("tier", "tenant", "route")
        .prefetch_related(
            Prefetch("limits", queryset=Limit.objects.order_by("dimension", "period"))
        )
        .order_by("id")
    )
    serializer_class = PolicySerializer
    filterset_class = PolicyFilter
    ordering_fields = ("id", "updated_at", "expires_at")
    support_may_write = True

    def perform_create(self, serializer):
        data = dict(serializer.validated_data)
        limits = [Limit(**_limit_fields(item)) for item in data.pop("limits")]
        policy = rules.policy_save(
            policy=Policy(**data), limits=limits, actor=actor_from(self.request)
        )
        serializer.instance = policy

    def perform_update(self, serializer):
        policy, data = serializer.instance, dict(serializer.validated_data)
        incoming = data.pop("limits", None)
        for name, value in data.items():
            setattr(policy, name, value)
        limits = (
            list(policy.limits.all())
            if incoming is None
            else _merge_limits(policy, incoming)
        )
        rules.policy_save(
            policy=policy,
            limits=limits,
            actor=actor_from(self.request),
            expected_revision=self.expected_revision(),
        )
        serializer.instance = Policy.objects.prefetch_related("limits").get(
            pk=policy.pk
        )

    def perform_destroy(self, instance):
        rules.rule_delete(
            obj=instance,
            actor=actor_from(self.request),
            expected_revision=self.expected_revision(),
        )


def _limit_fields(item: dict) -> dict:
    return {name: value for name, value in item.items() if name != "id"}


def _merge_limits(policy: Policy, incoming: list[dict]) -> list[Limit]:
    """The policy's new limit list: items with a known ``id`` update that limit, others are new."""
    existing = {limit.pk: limit for limit in policy.limits.all()}
    merged = []
    for item in incoming:
        limit = existing.get(item.get("id")) or Limit()
        for name, value in _limit_fields(item).items():
            setattr(limit, name, value)
        merged.append(limit)
    return merged


class LimitViewSet(ManagementViewSet):
    """One limit at a time; saved through its policy so the policy stays valid as a whole."""

    queryset = Limit.objects.select_related("policy").order_by("id")
    serializer_class = LimitSerializer
    filterset_class = LimitFilter
    support_may_write = True

    def perform_create(self, serializer):
        limit = Limit(**serializer.validated_data)
        rules.limit_save(limit=limit, actor=actor_from(self.request))
        serializer.instance = limit

    def perform_update(self, serializer):
        limit, data = serializer.instance, dict(serializer.validated_data)
        data.pop("policy", None)  # a limit does not move between policies
        for name, value in data.items():
            setattr(limit, name, value)
        rules.limit_save(
            limit=limit,
            actor=actor_from(self.request),
            expected_revision=self.expected_revision(),
        )

    def perform_destroy(self, instance):
        rules.limit_delete(
            limit=instance,
            actor=actor_from(self.request),
            expected_revision=self.expected_revision(),
        )
