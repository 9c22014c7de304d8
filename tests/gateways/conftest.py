"""The stack of a gateway test: rules, Redis, the decision service, a backend, a real gateway.

Rules come from a server that speaks ``docs/gateway-protocol.md`` (the client's
own tests use it too); ``test_control_plane.py`` uses the real control plane.
Every test gets its own decision service and gateway processes, so a test may
kill them; the worker's Redis is emptied before each test.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from sluice import Bundle, Snapshot
from tests.celery_fixtures import wait_until
from tests.client.factories import ROUTES, limit, policy, rules, snapshot
from tests.client.protocol_server import ProtocolServer
from tests.gateways import servers
from tests.gateways.backend import Backend
from tests.servers import free_port

#: search (fails open) and orders.read (fails closed): 3 per tenant, then one every 10 s.
RULES = snapshot(
    rules(
        policy("default", "search", limit("tenant", 6, 60, 3)),
        policy("default", "orders.read", limit("tenant", 6, 60, 3)),
        routes=ROUTES,
    )
)

GATEWAYS = ("envoy", "nginx", "haproxy", "traefik")
#: The Envoy configurations, which log what Envoy decides itself to the service
#: (envoy.yaml: RLS; envoy-ext-authz.yaml: ext_authz, HTTP).
ENVOYS = ("envoy", "envoy_ext_authz")


@dataclass
class Answer:
    status: int
    headers: dict[str, str]  #: lower-case names
    body: bytes

    def json(self):
        return json.loads(self.body)


def call(
    port: int, path: str, *, tenant: str | None = None, method: str = "GET"
) -> Answer:
    """One request through the gateway on ``port``, as a client sends it."""
    headers = {"X-Tenant": tenant} if tenant else {}
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", headers=headers, method=method
    )
    try:
        # above the gateways' servers.DECIDE_TIMEOUT: a slow decision is the
        # gateway's to answer, never a client timeout
        with urllib.request.urlopen(request, timeout=30) as response:
            status, raw, body = response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        status, raw, body = error.code, error.headers, error.read()
    return Answer(status, {k.lower(): v for k, v in raw.items()}, body)


@dataclass
class Stack:
    """A gateway in front of the backend, deciding through its own decision service."""

    name: str
    port: int
    gateway: servers.Process
    service: servers.DecisionService
    rules: ProtocolServer
    backend: Backend

    def get(self, path: str, **kwargs) -> Answer:
        return call(self.port, path, **kwargs)


@pytest.fixture(scope="session")
def backend() -> Iterator[Backend]:
    server = Backend().start()
    yield server
    server.stop()


def start_gateway(
    name: str,
    workdir: Path,
    *,
    backend: int,
    service,
    generous: bool = True,
    strict: bool = False,
) -> tuple:
    port = free_port()
    if name == "envoy":
        process = servers.envoy(
            workdir,
            port=port,
            backend=backend,
            grpc=service.grpc_port,
            generous=generous,
            strict=strict,
        )
    elif name == "envoy_ext_authz":
        process = servers.envoy_ext_authz(
            workdir,
            port=port,
            backend=backend,
            http=service.http_port,
            grpc=service.grpc_port,
            generous=generous,
        )
    else:
        start = getattr(servers, name)
        process = start(
            workdir,
            port=port,
            backend=backend,
            http=service.http_port,
            generous=generous,
        )
    process.start()
    if name == "traefik":  # it listens before its file provider has loaded the routes
        wait_until(
            lambda: call(port, "/ready").status != 404,
            timeout=60,
            every=0.05,
            why="Traefik to load its routes",
        )
    return port, process


@pytest.fixture
def stack_of(redis_server, redis_client, backend, tmp_path):
    """``stack_of(name, rules)``: a running stack; everything stops after the test.

    ``documented=True``: the service and the gateway at the settings the docs
    give (timeouts, workers), not the tests' generous ones; ``strict``: Envoy's
    variant that fails closed on its own timer (``servers.STRICT``);
    ``gateway_documented=True``: only the gateway's timeouts as documented;
    ``budget``: the service's forward-auth budget (seconds) instead of its own.
    """
    started: list = []

    def make(
        name: str,
        served: Snapshot = RULES,
        *,
        documented: bool = False,
        strict: bool = False,
        gateway_documented: bool = False,
        budget: float | None = None,
    ) -> Stack:
        rules_server = ProtocolServer().start()
        started.append(rules_server)
        rules_server.serve(Bundle(served))
        make_service = (
            servers.DecisionService.documented
            if documented
            else servers.DecisionService
        )
        service = make_service(
            rules_server.url.removesuffix("/api/v1/snapshot"),
            rules_server.token,
            redis_server.url,
            tmp_path,
            gateway_id=f"{name}-test",
            # Envoy's files log what Envoy decides itself to the service
            extra=("--gateway-logs",) if name in ENVOYS else (),
        )
        if budget is not None:
            service = replace(service, budget=budget)
        service.start().wait_version(served.version)
        started.append(service)
        port, gateway = start_gateway(
            name,
            tmp_path,
            backend=backend.port,
            service=service,
            generous=not (documented or gateway_documented),
            strict=strict,
        )
        started.append(gateway)
        return Stack(name, port, gateway, service, rules_server, backend)

    yield make
    for thing in reversed(started):
        thing.stop()
