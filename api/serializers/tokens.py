"""API and gateway tokens: the same fields; the secret only in the answer to a create."""

from rest_framework import serializers

from api.serializers.strict import StrictModelSerializer
from limits.models import ApiToken, GatewayToken

TOKEN_FIELDS = ("id", "name", "prefix", "created_at", "last_used_at", "revoked_at")


def token_serializers(model) -> tuple[type, type]:
    """The serializer of ``model`` tokens, and the one of a freshly created token."""

    class Listed(StrictModelSerializer):
        class Meta:
            fields = TOKEN_FIELDS
            read_only_fields = tuple(f for f in TOKEN_FIELDS if f != "name")

    Listed.Meta.model = model
    Listed.__name__ = f"{model.__name__}Serializer"

    class Created(Listed):
        secret = serializers.CharField(
            read_only=True, help_text="Shown once; store it now."
        )

        class Meta(Listed.Meta):
            fields = (*TOKEN_FIELDS, "secret")

    Created.__name__ = f"{model.__name__}CreatedSerializer"
    return Listed, Created


ApiTokenSerializer, ApiTokenCreatedSerializer = token_serializers(ApiToken)
GatewayTokenSerializer, GatewayTokenCreatedSerializer = token_serializers(GatewayToken)
