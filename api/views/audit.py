"""The audit log (read only) and the caller's own API tokens."""

from rest_framework import mixins, status, viewsets
from rest_framework.response import Response

from api.filters import AuditFilter
from api.permissions import AnyRole
from api.serializers.audit import (
    ApiTokenCreatedSerializer,
    ApiTokenSerializer,
    AuditEntrySerializer,
)
from limits.models import ApiToken, AuditEntry
from limits.tokens import token_create, token_revoke

from .base import ReadOnlyManagementViewSet, StrictQueryMixin, actor_from


class AuditEntryViewSet(ReadOnlyManagementViewSet):
    """Every recorded change, newest first. There is no way to change or delete an entry."""

    queryset = AuditEntry.objects.all()
    serializer_class = AuditEntrySerializer
    filterset_class = AuditFilter
    search_fields = ("object_repr", "reason")


class ApiTokenViewSet(
    StrictQueryMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """Your own API tokens: the secret is returned once, by create; delete revokes."""

    queryset = ApiToken.objects.none()  # narrowed to the caller in get_queryset
    serializer_class = ApiTokenSerializer
    permission_classes = [AnyRole]

    def get_queryset(self):
        return ApiToken.objects.filter(user=self.request.user)

    def get_serializer_class(self):
        return (
            ApiTokenCreatedSerializer if self.action == "create" else ApiTokenSerializer
        )

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        token = ApiToken(user=request.user, name=serializer.validated_data["name"])
        token.secret = token_create(token=token, actor=actor_from(request))
        return Response(
            ApiTokenCreatedSerializer(token).data, status=status.HTTP_201_CREATED
        )

    def perform_destroy(self, instance):
        token_revoke(token=instance, actor=actor_from(self.request))
