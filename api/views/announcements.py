"""Announcements (public note and emergency mark per version), webhook endpoints and deliveries."""

import django_filters
from django.db.models import Prefetch
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from api.filters import IdFilter, StrictFilterSet
from api.serializers.announcements import (
    AnnouncementSerializer,
    DeliverySerializer,
    SecretSerializer,
    WebhookEndpointCreatedSerializer,
    WebhookEndpointSerializer,
)
from limits.announcements.deliveries import delivery_resend, webhook_endpoint_test
from limits.announcements.services import announcement_note_update
from limits.announcements.webhooks import (
    webhook_endpoint_create,
    webhook_endpoint_delete,
    webhook_endpoint_rotate_secret,
    webhook_endpoint_update,
)
from limits.models import Announcement, Delivery, DeliveryAttempt, WebhookEndpoint
from limits.versions.selectors import snapshot_get_active

from .base import (
    ManagementViewSet,
    ReadOnlyManagementViewSet,
    StrictQueryMixin,
    actor_from,
)

_HEAVY = ("snapshot__content", "snapshot__content_gzip", "snapshot__diff")


class AnnouncementViewSet(
    StrictQueryMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.UpdateModelMixin,
    viewsets.GenericViewSet,
):
    """One per version, newest first; PATCH changes the public note until it takes effect."""

    queryset = Announcement.objects.select_related("snapshot").defer(*_HEAVY)
    serializer_class = AnnouncementSerializer
    lookup_field = "snapshot__version"
    lookup_url_kwarg = "version"
    lookup_value_regex = r"[0-9]+"
    http_method_names = ["get", "patch", "head", "options"]

    def get_serializer_context(self):
        active = snapshot_get_active(light=True)
        return {
            **super().get_serializer_context(),
            "active_version": active and active.version,
        }

    def perform_update(self, serializer):
        serializer.instance = announcement_note_update(
            announcement=serializer.instance,
            note=serializer.validated_data.get("note", serializer.instance.note),
            actor=actor_from(self.request),
        )


class WebhookEndpointFilter(StrictFilterSet):
    tenant = django_filters.CharFilter(
        field_name="tenant__slug", help_text="A tenant slug."
    )

    class Meta:
        model = WebhookEndpoint
        fields = ("tenant", "is_active")


class WebhookEndpointViewSet(ManagementViewSet):
    """Endpoints of tenants; the secret is returned once, by create and rotate-secret."""

    queryset = WebhookEndpoint.objects.select_related("tenant").order_by("id")
    serializer_class = WebhookEndpointSerializer
    filterset_class = WebhookEndpointFilter
    support_may_write = True

    @extend_schema(responses={201: WebhookEndpointCreatedSerializer})
    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        endpoint = WebhookEndpoint(**serializer.validated_data)
        endpoint.secret = webhook_endpoint_create(
            endpoint=endpoint, actor=actor_from(request)
        )
        data = WebhookEndpointCreatedSerializer(endpoint).data
        return Response(data, status=status.HTTP_201_CREATED)

    def perform_update(self, serializer):
        endpoint = serializer.instance
        for name, value in serializer.validated_data.items():
            setattr(endpoint, name, value)
        webhook_endpoint_update(
            endpoint=endpoint,
            actor=actor_from(self.request),
            expected_revision=self.expected_revision(),
        )

    def perform_destroy(self, instance):
        webhook_endpoint_delete(endpoint=instance, actor=actor_from(self.request))

    @extend_schema(
        request=None,
        responses={202: DeliverySerializer},
        operation_id="webhook_endpoint_test",
    )
    @action(detail=True, methods=["post"], url_path="test")
    def test(self, request, pk=None):
        """Queue a signed ``ping`` event to this endpoint; follow it in /deliveries."""
        delivery = webhook_endpoint_test(
            endpoint=self.get_object(), actor=actor_from(request)
        )
        return Response(
            DeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED
        )

    @extend_schema(
        request=None,
        responses={200: SecretSerializer},
        operation_id="webhook_endpoint_rotate_secret",
    )
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request, pk=None):
        """Replace the signing secret at once; the new one is returned this time only."""
        secret = webhook_endpoint_rotate_secret(
            endpoint=self.get_object(), actor=actor_from(request)
        )
        return Response({"secret": secret})


class DeliveryFilter(StrictFilterSet):
    tenant = django_filters.CharFilter(
        field_name="tenant__slug", help_text="A tenant slug."
    )
    version = IdFilter(
        field_name="announcement__snapshot__version", max_value=2**31 - 1
    )
    endpoint = IdFilter(field_name="endpoint_id", help_text="A webhook endpoint id.")

    class Meta:
        model = Delivery
        fields = ("tenant", "version", "endpoint", "channel", "kind", "state")


class DeliveryViewSet(ReadOnlyManagementViewSet):
    """Every notification with its attempts (status, response time, error), newest first."""

    queryset = (
        Delivery.objects.select_related("tenant", "announcement__snapshot")
        .defer(*(f"announcement__{f}" for f in _HEAVY))
        .prefetch_related(
            Prefetch("attempts", queryset=DeliveryAttempt.objects.order_by("number"))
        )
    )
    serializer_class = DeliverySerializer
    filterset_class = DeliveryFilter
    support_may_write = True

    @extend_schema(
        request=None,
        responses={202: DeliverySerializer},
        operation_id="delivery_resend",
    )
    @action(detail=True, methods=["post"])
    def resend(self, request, pk=None):
        """Send a delivered or failed notification again, as the same event (audited)."""
        delivery = delivery_resend(
            delivery=self.get_object(), actor=actor_from(request)
        )
        return Response(
            DeliverySerializer(delivery).data, status=status.HTTP_202_ACCEPTED
        )
