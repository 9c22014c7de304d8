"""The stack of a gateway test: rules, Redis, the decision service, a backend, a real gateway.

Rules come from a server that speaks ``docs/gateway-protocol.md`` (the client's
own tests use it too); ``test_control_plane.py`` uses the real control plane.
Every test gets its own decision service and gateway processes, so a test may
kill them; the worker's Redis is emptied before each test.
"""

from __future__ import annotations

import itertools
import json
import shutil
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from sluice import Bundle, Snapshot
from tests.celery_fixtures import wait_until
from tests.client.factories import ROUTES, limit, policy, rules, snapshot
from tests.client.protocol_server import ProtocolServer
from tests.conformance import corpus
from tests.gateways import servers
from tests.gateways.backend import Backend
from tests.servers import RedisServer, free_port

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


# nginx with Sluice's Lua module (test_nginx_module*.py)


@pytest.fixture
def cache_dir():
    folder = Path(tempfile.mkdtemp(prefix="sluice-nginx-"))
    folder.chmod(0o777)  # nginx's workers run as nobody
    yield folder
    shutil.rmtree(folder)


@pytest.fixture
def nginx_on_own_redis(backend, tmp_path, cache_dir, rules_server):
    """nginx with a 200 ms Redis timeout on a Redis of its own, which the test may
    stop, pause or kill: (nginx's port, the Redis server)."""
    store = RedisServer().start()
    port = free_port()
    process = servers.nginx_module(
        tmp_path,
        port=port,
        backend=backend.port,
        control_plane=port_of(rules_server),
        redis=store.port,
        token=rules_server.token,
        cache=cache_dir,
        redis_timeout_ms=200,
    ).start()
    yield port, store
    process.stop()
    store.cleanup()


@pytest.fixture
def start_nginx(redis_server, redis_client, backend, tmp_path, cache_dir):
    """``start_nginx(control_plane_port, token)``: nginx with the module; stopped after."""
    started = []

    def start(
        control_plane: int,
        token: str = "gw_test_token",
        name: str = "ngx-a",
        public_keys: Path | None = None,
    ):
        port = free_port()
        process = servers.nginx_module(
            tmp_path,
            port=port,
            backend=backend.port,
            control_plane=control_plane,
            redis=redis_server.port,
            token=token,
            gateway_id=name,
            cache=cache_dir,
            public_keys=public_keys,
        )
        started.append(process.start())
        return port, process

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def rules_server():
    server = ProtocolServer().start()
    server.serve(corpus.bundle())
    yield server
    server.stop()


def port_of(server: ProtocolServer) -> int:
    return int(server.url.split(":")[2].split("/")[0])


def reported(server: ProtocolServer, header: str, value: str) -> bool:
    return any(r.get(header) == value for r in list(server.requests))


def wait_applied(rules_server, version: int = corpus.VERSION) -> None:
    """Until nginx reports, in its polls, that it applied ``version`` (the corpus'
    rules by default)."""
    wait_until(
        lambda: reported(rules_server, "Sluice-Applied-Version", str(version)),
        timeout=60,
        every=0.05,
        why=f"version {version} to be applied",
    )


_PROBES = itertools.count()


def decided_by_redis(port: int, tenant: str) -> bool:
    """Whether a search through nginx on ``port`` was decided on Redis: a tenant of
    its own per probe (``tenant`` and a number), since a call that timed out may
    still run on Redis later (the documented overshoot) and spend a probe tenant's
    small budget, which a 429 from a spent budget would hide."""
    answer = call(port, "/v1/search", tenant=f"{tenant}{next(_PROBES)}")
    return answer.status == 200 and "sluice-degraded" not in answer.headers


def all_at_once(port: int, requests: list[tuple[str, str]]) -> list[Answer]:
    """``(path, tenant)`` requests sent together, each on its own connection."""
    with ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(lambda r: call(port, r[0], tenant=r[1]), requests))
