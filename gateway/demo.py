"""Demo gateway: sample Orders, Search and Reports backends behind the Sluice middleware.

Run ``make gateway`` (or ``python -m gateway.demo``). It polls the control
plane's snapshot endpoint for its rules (``sluice.SnapshotSource``),
decides every request in Redis, and answers 429 with RateLimit headers once a
tenant is over its limit. It is served by gunicorn (``gthread`` workers: each
worker process a gateway of its own, with its own poller, buckets for the
failure modes and decision events; threads answer the requests), with a
listen backlog of 2048. Configuration, all from the environment:

=========================== ========================================== ==============================
variable                    default                                    meaning
=========================== ========================================== ==============================
SLUICE_CONTROL_PLANE_URL    http://127.0.0.1:8000                      control plane base URL
SLUICE_GATEWAY_TOKEN        (empty)                                    gateway token (Bearer)
SLUICE_GATEWAY_TOKEN_FILE   (empty)                                    or a file holding it
SLUICE_PUBLIC_KEYS          (empty: the development key,               the keys bundles must be signed
                            .sluice/signing-key.pem, made on first     with: the control plane's
                            use, as the control plane does)            /.well-known/sluice-keys.json
SLUICE_GATEWAY_ID           the host name                              reported in Sluice-Gateway-Id
SLUICE_REDIS_URL            redis://127.0.0.1:6379/0                   Redis for the buckets (a cluster:
                                                                       seeds, comma-separated)
SLUICE_REDIS_CLUSTER        0                                          1: the URL names Redis Cluster nodes
SLUICE_REDIS_TIMEOUT        0.05                                       seconds per Redis call
SLUICE_SNAPSHOT_CACHE       .sluice/gateway-<id>.json                  last good rules on disk
SLUICE_POLL_INTERVAL        5                                          seconds between polls
SLUICE_TRUSTED_PROXIES      (empty)                                    comma-separated proxy addresses
SLUICE_GATEWAY_HOST / PORT  127.0.0.1 / 8080                           where the gateway listens
SLUICE_GATEWAY_WORKERS      2                                          gunicorn worker processes
SLUICE_GATEWAY_THREADS      16                                         threads per worker
SLUICE_BUNDLE_FILE          (empty)                                    rules from this bundle file
                                                                       (``manage.py gateway_bundle``)
                                                                       instead of polling; re-read
                                                                       when it changes
SLUICE_EVENTS               1                                          0: no decision events
SLUICE_EVENTS_REDIS_URL     SLUICE_REDIS_URL                           Redis of the decision stream
                                                                       (the control plane's REDIS_URL;
                                                                       a cluster's seeds when unset and
                                                                       SLUICE_REDIS_CLUSTER is 1)
SLUICE_GATEWAY_LOG_LEVEL    INFO                                       WARNING: no line per request
=========================== ========================================== ==============================

``GET /healthz`` answers 200 without a decision (readiness probes). Every
other answer carries ``Server-Timing: gateway;dur=<ms>``, the time the
process took to start it (decision and sample backend).

Callers identify themselves with ``X-Tenant``, ``X-User`` and ``X-Api-Key``
headers (a real gateway would derive them from its authentication).
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gunicorn.app.base import BaseApplication

from sluice import (
    DecisionEvents,
    Identity,
    Limiter,
    SnapshotSource,
    connect,
)
from sluice.rulesfile import RulesFile
from sluice.signing import KeyRing, dev_signing_key
from sluice.wsgi import RateLimitMiddleware

__all__ = [
    "Gateway",
    "GatewayServer",
    "backends",
    "build",
    "identify",
    "main",
    "server_options",
    "with_health",
    "with_timing",
]

logger = logging.getLogger("gateway.demo")
SNAPSHOT_PATH = "/api/v1/snapshot"


def identify(environ: dict[str, Any]) -> Identity:
    """The caller, from demo headers."""
    return Identity(
        tenant=environ.get("HTTP_X_TENANT") or None,
        user=environ.get("HTTP_X_USER") or None,
        api_key=environ.get("HTTP_X_API_KEY") or None,
    )


def _json(start_response: Callable[..., Any], status: str, data: Any) -> list[bytes]:
    body = json.dumps(data).encode()
    start_response(
        status,
        [("Content-Type", "application/json"), ("Content-Length", str(len(body)))],
    )
    return [body]


_ORDER = re.compile(r"^/v1/orders/([^/]+)$")
_EXPORT = re.compile(r"^/v1/reports/([^/]+)/export$")


def backends(
    environ: dict[str, Any], start_response: Callable[..., Any]
) -> Iterable[bytes]:
    """The sample services the gateway fronts: search, orders, reports."""
    method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "/")
    tenant = environ.get("HTTP_X_TENANT", "anonymous")
    if path == "/v1/search" and method == "GET":
        query = environ.get("QUERY_STRING", "")
        return _json(
            start_response, "200 OK", {"query": query, "results": ["widget", "gadget"]}
        )
    if path == "/v1/orders" and method == "GET":
        return _json(start_response, "200 OK", {"tenant": tenant, "orders": [1, 2, 3]})
    if path == "/v1/orders" and method == "POST":
        return _json(
            start_response,
            "201 Created",
            {"tenant": tenant, "order": 4, "status": "placed"},
        )
    if (match := _ORDER.match(path)) and method == "GET":
        return _json(
            start_response, "200 OK", {"order": match.group(1), "status": "shipped"}
        )
    if (match := _EXPORT.match(path)) and method == "POST":
        return _json(
            start_response,
            "202 Accepted",
            {"report": match.group(1), "export": "queued"},
        )
    return _json(start_response, "404 Not Found", {"error": "not_found", "path": path})


@dataclass
class Gateway:
    """The assembled gateway: the WSGI app, and the source, limiter and events behind it."""

    app: RateLimitMiddleware
    source: SnapshotSource | RulesFile
    limiter: Limiter
    events: DecisionEvents | None = None


def _token(env: Mapping[str, str]) -> str:
    """The gateway token, given directly or as a file (a mounted secret)."""
    path = env.get("SLUICE_GATEWAY_TOKEN_FILE", "")
    if path:
        with open(path, encoding="utf-8") as file:
            return file.read().strip()
    return env.get("SLUICE_GATEWAY_TOKEN", "")


#: The control plane's development key (``limits.core.signing``), when no keys are given.
DEV_KEY_PATH = Path(".sluice/signing-key.pem")


def _public_keys(env: Mapping[str, str]) -> KeyRing:
    """``SLUICE_PUBLIC_KEYS``'s key set; without it, the development key's public
    half (made on first use by whichever of the gateway and control plane starts first)."""
    path = env.get("SLUICE_PUBLIC_KEYS", "")
    if path:
        return KeyRing.load(path)
    logger.warning(
        "signing.dev_key_trusted: %s; set SLUICE_PUBLIC_KEYS outside a demo",
        DEV_KEY_PATH.resolve(),
    )
    return KeyRing([dev_signing_key(DEV_KEY_PATH)])


def _source(env: Mapping[str, str], gateway_id: str) -> SnapshotSource | RulesFile:
    keys = _public_keys(env)
    if env.get("SLUICE_BUNDLE_FILE"):
        return RulesFile(env["SLUICE_BUNDLE_FILE"], strict=False, public_keys=keys)
    base = env.get("SLUICE_CONTROL_PLANE_URL", "http://127.0.0.1:8000").rstrip("/")
    return SnapshotSource(
        base + SNAPSHOT_PATH,
        _token(env),
        gateway_id=gateway_id,
        public_keys=keys,
        cache_path=env.get("SLUICE_SNAPSHOT_CACHE")
        or f".sluice/gateway-{gateway_id}.json",
        interval=float(env.get("SLUICE_POLL_INTERVAL", "5")),
    )


def _events(env: Mapping[str, str], gateway_id: str) -> DecisionEvents | None:
    if env.get("SLUICE_EVENTS", "1") == "0":
        return None
    url = env.get("SLUICE_EVENTS_REDIS_URL")
    cluster = not url and env.get("SLUICE_REDIS_CLUSTER", "0") == "1"
    url = url or env.get("SLUICE_REDIS_URL", "redis://127.0.0.1:6379/0")
    # The flush runs in a background thread: a generous timeout costs no request anything.
    return DecisionEvents(
        connect(url, timeout=2.0, cluster=cluster), gateway_id=gateway_id
    )


def build(env: Mapping[str, str]) -> Gateway:
    """Assemble the gateway from ``env`` (see the module docstring); nothing starts yet."""
    gateway_id = env.get("SLUICE_GATEWAY_ID") or socket.gethostname()
    source = _source(env, gateway_id)
    cluster = env.get("SLUICE_REDIS_CLUSTER", "0") == "1"
    client = connect(
        env.get("SLUICE_REDIS_URL", "redis://127.0.0.1:6379/0"),
        timeout=float(env.get("SLUICE_REDIS_TIMEOUT", "0.05")),
        cluster=cluster,
    )
    events = _events(env, gateway_id)
    limiter = Limiter(client, source, events=events)
    proxies = [p for p in env.get("SLUICE_TRUSTED_PROXIES", "").split(",") if p.strip()]
    app = RateLimitMiddleware(
        backends,
        limiter,
        identify=identify,
        trusted_proxies=proxies,
        github_headers=True,
    )
    return Gateway(app, source, limiter, events)


def server_options(env: Mapping[str, str]) -> dict[str, Any]:
    """gunicorn's settings for the gateway, from ``env`` (see the module docstring)."""
    host = env.get("SLUICE_GATEWAY_HOST", "127.0.0.1")
    port = env.get("SLUICE_GATEWAY_PORT", "8080")
    quiet = env.get("SLUICE_GATEWAY_LOG_LEVEL", "INFO").upper() not in ("DEBUG", "INFO")
    return {
        "bind": f"{host}:{port}",
        "workers": int(env.get("SLUICE_GATEWAY_WORKERS", "2")),
        "worker_class": "gthread",
        "threads": int(env.get("SLUICE_GATEWAY_THREADS", "16")),
        "backlog": 2048,
        "keepalive": 5,
        "graceful_timeout": 10,
        "accesslog": None if quiet else "-",
        "loglevel": "warning" if quiet else "info",
        "worker_exit": _worker_exit,
    }


#: The gateway this worker process built (each gunicorn worker builds its own).
_running: Gateway | None = None


class GatewayServer(BaseApplication):  # type: ignore[misc]  # gunicorn is untyped
    """gunicorn running the demo gateway: each worker builds and starts its own."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        super().__init__()

    def load_config(self) -> None:
        for name, value in server_options(self.env).items():
            self.cfg.set(name, value)

    def load(self) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
        """Called in each worker after the fork: threads must start there."""
        global _running
        gateway = _running = build(self.env)
        gateway.source.start()
        if gateway.events is not None:
            gateway.events.start()
        return with_health(with_timing(gateway.app))


def with_timing(
    app: Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]],
) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """Add ``Server-Timing: gateway;dur=<ms>``: how long the gateway took to start
    its answer (the decision, and the sample backend), as the process saw it."""

    def application(
        environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        began = time.perf_counter()

        def timed(status: str, headers: list[tuple[str, str]], *exc: Any) -> Any:
            took = (time.perf_counter() - began) * 1000
            return start_response(
                status, [*headers, ("Server-Timing", f"gateway;dur={took:.2f}")], *exc
            )

        return app(environ, timed)

    return application


def with_health(
    app: Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]],
) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """``GET /healthz`` answered 200 before the limiter (load balancers, readiness
    probes: not a decision, not an event); everything else goes to ``app``."""

    def application(
        environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        if environ.get("PATH_INFO") == "/healthz":
            return _json(start_response, "200 OK", {"status": "ok"})
        return app(environ, start_response)

    return application


def _worker_exit(server: Any, worker: Any) -> None:
    """Stop polling and flush the last decision events when a worker stops."""
    if _running is not None:
        _running.source.stop()
        if _running.events is not None:
            _running.events.stop()


def main() -> None:
    logging.basicConfig(
        level=os.environ.get("SLUICE_GATEWAY_LOG_LEVEL", "INFO").upper(),
        format="%(asctime)s %(name)s %(message)s",
    )
    env = dict(os.environ)
    bind = server_options(env)["bind"]
    origin = env.get("SLUICE_BUNDLE_FILE") or env.get(
        "SLUICE_CONTROL_PLANE_URL", "http://127.0.0.1:8000"
    )
    print(f"Sluice demo gateway on http://{bind}/v1/search  (rules from {origin})")
    GatewayServer(env).run()


if __name__ == "__main__":
    main()
