"""API tokens (your own) and gateway tokens: created with the secret shown once; delete revokes."""

from rest_framework import mixins, status, viewsets
from rest_framework.response import Response

from api.permissions import AnyRole, RolePermission
from api.serializers.tokens import (
    ApiTokenCreatedSerializer,
    ApiTokenSerializer,
    GatewayTokenCreatedSerializer,
    GatewayTokenSerializer,
)
from api.views.base import StrictQueryMixin, actor_from
from limits.gateways.tokens import token_create, token_revoke
from limits.models import ApiToken, GatewayToken


class TokenViewSet(
    StrictQueryMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    mixins.DestroyModelMixin,
    viewsets.GenericViewSet,
):
    """List, read, create (the response carries the secret, once) and revoke (DELETE)."""

    created_serializer_class = None

    def get_serializer_class(self):
        return (
            self.created_serializer_class
            if self.action == "create"
            else self.serializer_class
        )

    def new_token(self, name: str):
        raise NotImplementedError

    def create(self, request, *args, **kwargs):
        serializer = self.get_serializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        token = self.new_token(serializer.validated_data["name"])
        token.secret = token_create(token=token, actor=actor_from(request))
        body = self.created_serializer_class(token).data
        return Response(body, status=status.HTTP_201_CREATED)

    def perform_destroy(self, instance):
        token_revoke(token=instance, actor=actor_from(self.request))


class ApiTokenViewSet(TokenViewSet):
    """Your own API tokens, for automation acting as you (with your role)."""

    queryset = ApiToken.objects.none()  # narrowed to the caller in get_queryset
    serializer_class = ApiTokenSerializer
    created_serializer_class = ApiTokenCreatedSerializer
    permission_classes = [AnyRole]

    def get_queryset(self):
        return ApiToken.objects.filter(user=self.request.user)

    def new_token(self, name: str):
        return ApiToken(user=self.request.user, name=name)


class GatewayTokenViewSet(TokenViewSet):
    """Tokens gateways poll with; product creates and revokes, every role reads."""

    queryset = GatewayToken.objects.all()
    serializer_class = GatewayTokenSerializer
    created_serializer_class = GatewayTokenCreatedSerializer
    permission_classes = [RolePermission]

    def new_token(self, name: str):
        return GatewayToken(name=name)
