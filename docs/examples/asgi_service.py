"""An ASGI service behind Sluice (docs/gateway-integration.md; run by tests/test_docs_examples.py)."""

from sluice import AsyncLimiter, Identity, KeyRing, SnapshotSource, connect_async
from sluice.asgi import RateLimitMiddleware


async def search(scope, receive, send):
    """The service itself (any ASGI app: Starlette, FastAPI, Django's ASGI handler)."""
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"application/json")],
        }
    )
    await send({"type": "http.response.body", "body": b'{"results": []}'})


async def identify(scope) -> Identity:
    """Who is calling, from what the service's authentication put in the scope."""
    state = scope.get("state", {})
    return Identity(tenant=state.get("tenant"), user=state.get("user_id"))


def build(
    *,
    control_plane: str,
    token: str,
    redis_url: str,
    cache_path: str,
    gateway_id: str,
    public_keys: str,  # the control plane's /.well-known/sluice-keys.json, saved
    redis_timeout: float = 0.05,  # past that, the route's failure mode decides
):
    source = SnapshotSource(
        f"{control_plane}/api/v1/snapshot",
        token,
        gateway_id=gateway_id,
        public_keys=KeyRing.load(public_keys),  # bundles must be signed by one of them
        cache_path=cache_path,
    ).start()  # polls in a thread: a request never waits for the control plane
    limiter = AsyncLimiter(connect_async(redis_url, timeout=redis_timeout), source)
    return RateLimitMiddleware(search, limiter, identify=identify)
