"""GET /.well-known/sluice-keys.json: the public keys gateway bundles are signed with."""

from django.http import HttpRequest, JsonResponse
from django.views.decorators.http import require_GET

from limits.core.signing import public_keyring


@require_GET
def signing_keys_view(request: HttpRequest) -> JsonResponse:
    """The ``sluice-keys.json`` document (``sluice.signing``): public, so operators
    can compare it with what their gateways are configured to trust. Gateways
    never fetch it for themselves: a key fetched from the server it vouches for
    proves nothing."""
    response = JsonResponse(public_keyring().to_json())
    response["Cache-Control"] = "public, max-age=300"
    return response
