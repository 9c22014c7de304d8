"""A WSGI service behind Sluice (docs/gateway-integration.md; run by tests/test_docs_examples.py)."""

from sluice import Identity, KeyRing, Limiter, SnapshotSource, connect
from sluice.wsgi import RateLimitMiddleware


def orders(environ, start_response):
    """The service itself: it never sees a request the limiter refused."""
    start_response("200 OK", [("Content-Type", "application/json")])
    return [b'{"orders": []}']


def identify(environ) -> Identity:
    """Who is calling. A real service reads its own authentication here (a verified
    token, a session); never a header a client can set."""
    return Identity(
        tenant=environ.get("myapp.tenant"),
        user=environ.get("myapp.user_id"),
        api_key=environ.get("myapp.api_key_id"),
    )


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
    """The service wrapped by the rate limiter, its rules polled from the control plane."""
    source = SnapshotSource(
        f"{control_plane}/api/v1/snapshot",
        token,
        gateway_id=gateway_id,
        public_keys=KeyRing.load(public_keys),  # bundles must be signed by one of them
        cache_path=cache_path,  # last known good rules: used when the control plane is down
    ).start()
    limiter = Limiter(connect(redis_url, timeout=redis_timeout), source)
    return RateLimitMiddleware(
        orders,
        limiter,
        identify=identify,
        trusted_proxies=["10.0.0.0/8"],  # X-Forwarded-For is believed only from these
        github_headers=True,
    )
