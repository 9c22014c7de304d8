"""Each gateway of ``docs/gateways/`` as the speed bench runs it: with Sluice, without a
limit, and with the gateway's own local limiter.

The Sluice variant is the documented file exactly as the tests run it
(``tests.gateways.servers``: free ports, the decision service given seconds).
The others are that same rendered file with Sluice taken out, or replaced by
the gateway's own limiter, admitting everything the bench sends:

- Envoy: the rate-limit filters removed (``bench.gateways.without_filter``);
  local: ``envoy.filters.http.local_ratelimit``, one token bucket per Envoy
  (a per-tenant bucket needs every tenant listed in the file);
- nginx: ``auth_request`` removed; local: ``limit_req`` keyed by ``X-Tenant``;
- HAProxy: the Lua action removed; Traefik: the ``forwardAuth`` middleware removed.

:class:`Stack` holds what a run starts (Redis, the rules, decision services,
the trivial servers of ``bench/trivial.py``, the gateways) and stops it all.
"""

from __future__ import annotations

import os
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from bench.common import PYTHON, ROOT
from bench.gateways import without_filter
from tests.client.protocol_server import ProtocolServer
from tests.gateways import servers
from tests.servers import RedisServer, free_port

SLUICE, NONE, LOCAL = "Sluice", "no limit", "local limiter"

#: Envoy's own limiter, admitting all the bench sends (a bucket of a million a second).
LOCAL_RATELIMIT = {
    "name": "envoy.filters.http.local_ratelimit",
    "typed_config": {
        "@type": "type.googleapis.com/envoy.extensions.filters.http.local_ratelimit.v3.LocalRateLimit",
        "stat_prefix": "local",
        "token_bucket": {
            "max_tokens": 1_000_000,
            "tokens_per_fill": 1_000_000,
            "fill_interval": "1s",
        },
        "filter_enabled": {
            "runtime_key": "local_enabled",
            "default_value": {"numerator": 100, "denominator": "HUNDRED"},
        },
        "filter_enforced": {
            "runtime_key": "local_enforced",
            "default_value": {"numerator": 100, "denominator": "HUNDRED"},
        },
    },
}

#: nginx's own limiter: per tenant, in the worker's shared memory, admitting all.
NGINX_ZONE = "limit_req_zone $http_x_tenant zone=local:10m rate=100000r/s;\n    "
NGINX_LIMIT = "limit_req zone=local burst=100000 nodelay;"


@dataclass
class Gateway:
    """One gateway variant, running: where to send requests, and what its CPU is."""

    name: str  #: "Envoy (RLS)", "Envoy (ext_authz)", "nginx", ...
    family: str  #: "Envoy", "nginx", ...: the gateway whose baselines it is compared to
    variant: str  #: SLUICE, NONE or LOCAL
    process: servers.Process
    #: other processes a request costs (the decision service and its Redis)
    helpers: list[int] = field(default_factory=list)

    @property
    def port(self) -> int:
        return self.process.port

    @property
    def pids(self) -> list[int]:
        assert self.process.process is not None
        return [self.process.process.pid, *self.helpers]


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    if old not in text:
        raise RuntimeError(
            f"{path} no longer says {old!r}: update bench/gateway_variants.py"
        )
    path.write_text(text.replace(old, new))


def envoy(workdir: Path, *, backend: int, grpc: int, variant: str) -> servers.Process:
    """Envoy on envoy.yaml: through the RLS filter, or with it removed or replaced."""
    process = servers.envoy(workdir, port=free_port(), backend=backend, grpc=grpc)
    if variant == SLUICE:
        return process
    port = free_port()
    bare = without_filter(Path(process.command[2]), port)
    if variant == LOCAL:
        config = yaml.safe_load(bare.read_text())
        manager = config["static_resources"]["listeners"][0]["filter_chains"][0]
        manager["filters"][0]["typed_config"]["http_filters"].insert(0, LOCAL_RATELIMIT)
        bare = bare.with_name(f"local-{bare.name}")
        bare.write_text(yaml.safe_dump(config))
    command = [servers.binary("envoy"), "-c", str(bare), "--log-level", "warning"]
    command += ["--disable-hot-restart", "--concurrency", "1"]
    return servers.Process(command, port)


def envoy_ext_authz(
    workdir: Path, *, backend: int, http: int, grpc: int
) -> servers.Process:
    """Envoy on envoy-ext-authz.yaml (its no-limit variant is Envoy's above)."""
    return servers.envoy_ext_authz(
        workdir, port=free_port(), backend=backend, http=http, grpc=grpc
    )


def nginx(workdir: Path, *, backend: int, http: int, variant: str) -> servers.Process:
    process = servers.nginx(workdir, port=free_port(), backend=backend, http=http)
    config = Path(process.command[-1])
    if variant == NONE:
        _edit(config, "auth_request /_sluice;", "")
    elif variant == LOCAL:
        _edit(config, "auth_request /_sluice;", NGINX_LIMIT)
        _edit(config, "upstream backend {", NGINX_ZONE + "upstream backend {")
    return process


def haproxy(workdir: Path, *, backend: int, http: int, variant: str) -> servers.Process:
    process = servers.haproxy(workdir, port=free_port(), backend=backend, http=http)
    if variant == NONE:
        _edit(Path(process.command[-1]), "    http-request lua.sluice_decide\n", "")
    return process


def traefik(workdir: Path, *, backend: int, http: int, variant: str) -> servers.Process:
    process = servers.traefik(workdir, port=free_port(), backend=backend, http=http)
    if variant == NONE:
        flag = "--providers.file.filename="
        config = Path(
            next(a for a in process.command if a.startswith(flag))[len(flag) :]
        )
        _edit(config, "      middlewares: [sluice-closed]\n", "")
        _edit(config, "      middlewares: [sluice-open]\n", "")
    return process


def wait_routed(port: int, timeout: float = 60.0) -> None:
    """Until the gateway on ``port`` routes (Traefik listens before it loads its routes)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=5):
                return
        except urllib.error.HTTPError as error:
            if error.code != 404:
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"nothing routed on {port} after {timeout:.0f} s")
        time.sleep(0.05)


def accepts_workers() -> bool:
    """Whether the installed ``sluice-decide`` has ``--workers`` (the lead's change)."""
    done = subprocess.run(
        [str(servers.BIN / "sluice-decide"), "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return "--workers" in done.stdout


@dataclass
class Stack:
    """What the bench runs: Redis, the rules, services, the upstream, the gateways."""

    workdir: Path
    redis: RedisServer
    rules: ProtocolServer
    started: list

    def service(self, *extra: str) -> servers.DecisionService:
        service = servers.DecisionService(
            self.rules.url.removesuffix("/api/v1/snapshot"),
            self.rules.token,
            self.redis.url,
            self.workdir,
            gateway_id=f"bench-{len(self.started)}",
            poll_interval=5.0,
            redis_timeout=1.0,
            extra=extra,
        ).start()
        self.started.append(service)
        return service.wait_version(1)

    def process(self, process: servers.Process) -> servers.Process:
        self.started.append(process.start())
        return process

    def stop(self) -> None:
        for thing in reversed(self.started):
            thing.stop()
        self.rules.stop()
        self.redis.cleanup()


def trivial(stack: Stack) -> tuple[list[int], int, int]:
    grpc_port, http_port = free_port(), free_port()
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    for kind, port in (("grpc", grpc_port), ("http", http_port)):
        stack.process(
            servers.Process(
                [PYTHON, "-m", "bench.trivial", kind, f"127.0.0.1:{port}"],
                port,
                env=env,
                cwd=ROOT,
            )
        )
    pids = [p.process.pid for p in stack.started[-2:]]
    return pids, grpc_port, http_port


def start_gateways(
    stack: Stack, service: servers.DecisionService, backend: int
) -> list[Gateway]:
    """Every gateway variant, started, in the order they are measured."""
    workdir, grpc_port, http = stack.workdir, service.grpc_port, service.http_port
    assert service.process is not None
    assert service.process.process is not None
    assert stack.redis.process is not None
    helpers = [service.process.process.pid, stack.redis.process.pid]

    def on_envoy(variant: str) -> servers.Process:
        return envoy(workdir, backend=backend, grpc=grpc_port, variant=variant)

    made = [
        ("Envoy (RLS)", "Envoy", SLUICE, on_envoy(SLUICE)),
        (
            "Envoy (ext_authz)",
            "Envoy",
            SLUICE,
            envoy_ext_authz(workdir, backend=backend, http=http, grpc=grpc_port),
        ),
        ("Envoy", "Envoy", NONE, on_envoy(NONE)),
        ("Envoy", "Envoy", LOCAL, on_envoy(LOCAL)),
    ]
    for family, start, variants in (
        ("nginx", nginx, (SLUICE, NONE, LOCAL)),
        ("HAProxy", haproxy, (SLUICE, NONE)),
        ("Traefik", traefik, (SLUICE, NONE)),
    ):
        for variant in variants:
            process = start(workdir, backend=backend, http=http, variant=variant)
            made.append((family, family, variant, process))
    gateways = []
    for name, family, variant, process in made:
        stack.process(process)
        wait_routed(process.port)
        pids = helpers if variant == SLUICE else []
        gateways.append(Gateway(name, family, variant, process, pids))
    return gateways
