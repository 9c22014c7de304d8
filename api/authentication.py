"""How callers prove who they are: API tokens for automation (people use their session),
gateway tokens for gateways."""

from django.contrib.auth.models import AnonymousUser
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from limits.gateways.tokens import api_token_authenticate, gateway_token_authenticate
from limits.models import ApiToken, GatewayToken


def bearer_secret(request, prefix: str) -> str | None:
    """The token in ``Authorization: Bearer <secret>`` if it has ``prefix``, else None."""
    header = authentication.get_authorization_header(request).decode("latin-1")
    scheme, _, secret = header.partition(" ")
    if scheme.lower() != "bearer" or not secret.strip().startswith(prefix):
        return None
    return secret.strip()


class ApiTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer slu_...``: act as the token's user, with that user's role."""

    def authenticate(self, request):
        secret = bearer_secret(request, ApiToken.PREFIX)
        if secret is None:
            return None
        token = api_token_authenticate(secret)
        if token is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked API token.")
        return token.user, token

    def authenticate_header(self, request):
        return 'Bearer realm="sluice"'


class ApiTokenScheme(OpenApiAuthenticationExtension):
    target_class = "api.authentication.ApiTokenAuthentication"
    name = "apiToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "An API token (slu_...).",
        }


class GatewayAuth(str):
    """``request.auth`` of a gateway: the prefix of its token. It has no user and no role."""


class GatewayTokenAuthentication(authentication.BaseAuthentication):
    """``Authorization: Bearer slg_...``: a gateway, which may only read snapshots."""

    def authenticate(self, request):
        secret = bearer_secret(request, GatewayToken.PREFIX)
        if secret is None:
            return None
        prefix = gateway_token_authenticate(secret)
        if prefix is None:
            raise exceptions.AuthenticationFailed("Invalid or revoked gateway token.")
        return AnonymousUser(), GatewayAuth(prefix)

    def authenticate_header(self, request):
        return 'Bearer realm="sluice-gateway"'


class GatewayTokenScheme(OpenApiAuthenticationExtension):
    target_class = "api.authentication.GatewayTokenAuthentication"
    name = "gatewayToken"

    def get_security_definition(self, auto_schema):
        return {
            "type": "http",
            "scheme": "bearer",
            "description": "A gateway token (slg_...).",
        }
