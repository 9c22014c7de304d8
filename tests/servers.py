"""Real Redis servers (and a real Redis Cluster) started by the test session on loopback.

Each pytest-xdist worker starts its own, so tests can flush, pause or kill
them without touching the machine's shared Redis or each other.
"""

from __future__ import annotations

import itertools
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import redis

ROOT = Path(__file__).resolve().parents[1]
#: Seconds a server started here has to answer: generous, a loaded machine may take
#: long to start a process, and no test is about how fast that is.
START_TIMEOUT = 60.0
#: Seconds a server has to end once asked (then it is killed).
STOP_TIMEOUT = 60.0


#: Where servers of the tests listen: below the kernel's ephemeral range (32768 and
#: up here), which outgoing connections take their ports from. A port the kernel
#: handed out with bind(0) could be taken by a client socket (the overload tests
#: open hundreds) before the server bound it. Each test worker gets a slice of its
#: own, so two workers never hand out the same port; 20000 and up stay free for
#: the Redis Cluster's bus ports (port + 10000).
_PORTS = range(10_000, 20_000)


def _port_slice() -> range:
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
    size = len(_PORTS) // max(workers, 1)
    start = _PORTS.start + size * (worker % max(workers, 1))
    return range(start, start + size)


_SLICE = _port_slice()
_next_port = itertools.islice(
    itertools.cycle(_SLICE), random.randrange(len(_SLICE)), None
)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, from this test
    worker's own slice (in turn, so a port is not handed out twice in a row)."""
    for _ in range(len(_SLICE)):
        port = next(_next_port)
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {_SLICE}")


@dataclass
class RedisServer:
    """A redis-server process on 127.0.0.1 that keeps nothing on disk (``binary``: another
    server that speaks the protocol, such as valkey-server)."""

    port: int = field(default_factory=free_port)
    extra: tuple[str, ...] = ()
    binary: str | None = None
    process: subprocess.Popen | None = None
    workdir: Path = field(
        default_factory=lambda: Path(tempfile.mkdtemp(prefix="sluice-redis-"))
    )

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        binary = self.binary or shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server is not installed (Debian: apt-get install redis-server)"
            )
        args = [
            binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.workdir),
            *self.extra,
        ]
        self.process = subprocess.Popen(
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Until the server answers PING; fail at once if it ended (a port taken meanwhile)."""
        client = redis.Redis(port=self.port, socket_connect_timeout=1)
        deadline = time.monotonic() + timeout
        while True:
            try:
                client.ping()
                return
            except (redis.ConnectionError, redis.TimeoutError):
                if self.process is not None and self.process.poll() is not None:
                    raise RuntimeError(
                        f"redis-server on port {self.port} ended "
                        f"(exit status {self.process.returncode})"
                    ) from None
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.02)
            finally:
                client.close()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=STOP_TIMEOUT)
        self.process = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def kill(self) -> None:
        """SIGKILL, as a crash or an OOM kill would: no shutdown, nothing saved."""
        if self.process and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT)
        self.process = None

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too."""
    while True:
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


@dataclass
class RedisClusterServers:
    """A real Redis Cluster of ``masters`` redis-server processes on 127.0.0.1.

    ``replicas`` per master (0 by default); ``node_timeout`` (ms) is how long a
    silent master takes to be declared failed before its replica takes over.
    """

    masters: int = 3
    replicas: int = 0
    node_timeout: int = 5000
    extra: tuple[str, ...] = ()
    nodes: list[RedisServer] = field(default_factory=list)

    @property
    def url(self) -> str:
        return self.nodes[0].url

    def start(self) -> RedisClusterServers:
        for _ in range(self.masters * (1 + self.replicas)):
            node = RedisServer(
                port=free_cluster_port(),
                extra=(
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    "nodes.conf",
                    "--cluster-node-timeout",
                    str(self.node_timeout),
                    *self.extra,
                ),
            )
            self.nodes.append(node.start())
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        subprocess.run(
            [
                "redis-cli",
                "--cluster",
                "create",
                *addresses,
                "--cluster-replicas",
                str(self.replicas),
                "--cluster-yes",
            ],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
        )
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Wait until every node reports the cluster ok with every slot assigned."""
        deadline = time.monotonic() + timeout
        for node in self.nodes:
            client = redis.Redis(port=node.port)
            try:
                while True:
                    info = client.cluster("INFO")
                    if (
                        info.get("cluster_state") == "ok"
                        and int(info.get("cluster_slots_ok", 0)) == 16384
                    ):
                        break
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"Redis Cluster not ready: {info}")
                    time.sleep(0.05)
            finally:
                client.close()

    def wait_replicas(self, timeout: float = START_TIMEOUT) -> None:
        """Wait until ``masters x replicas`` nodes are replicas linked to their master."""
        deadline = time.monotonic() + timeout
        while self._linked_replicas() < self.masters * self.replicas:
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster's replicas never all linked up")
            time.sleep(0.05)

    def _linked_replicas(self) -> int:
        linked = 0
        for node in self.nodes:
            client = redis.Redis(port=node.port)
            try:
                info = client.info("replication")
            finally:
                client.close()
            linked += info.get("master_link_status") == "up"
        return linked

    def role(self, node: RedisServer) -> str:
        """``master`` or ``slave``, as the node itself says."""
        client = redis.Redis(port=node.port)
        try:
            return client.info("replication")["role"]
        finally:
            client.close()

    def cleanup(self) -> None:
        for node in self.nodes:
            node.cleanup()
        self.nodes.clear()


@dataclass
class ControlPlaneServer:
    """gunicorn serving the control plane on 127.0.0.1, in its own process group.

    ``env`` names the database and Redis (``DATABASE_URL``, ``REDIS_URL``);
    ``settings`` the Django settings module.
    """

    env: dict[str, str]
    port: int = field(default_factory=free_port)
    workers: int = 1
    settings: str = "controlplane.settings"
    cpus: str | None = None  #: a ``taskset`` CPU list, e.g. "1"
    log: Path = field(
        default_factory=lambda: Path(tempfile.mkstemp(prefix="sluice-gunicorn-")[1])
    )
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ControlPlaneServer:
        command = [sys.executable, "-m", "gunicorn", "controlplane.wsgi:application"]
        command += ["--bind", f"127.0.0.1:{self.port}", "--workers", str(self.workers)]
        command += ["--log-level", "warning", "--backlog", "2048"]
        if self.cpus is not None:
            command = ["taskset", "-c", self.cpus, *command]
        env = {**self.env, "DJANGO_SETTINGS_MODULE": self.settings}
        self.process = start_logged(command, env, self.log)
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Until a worker answers HTTP: gunicorn binds before its worker has booted, and
        a request sent meanwhile waits for the boot (seconds, on a loaded machine)."""
        deadline = time.monotonic() + timeout
        while True:
            if _answers_http(f"{self.url}/healthz", deadline):
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"gunicorn did not start:\n{self.log.read_text()[-3000:]}"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        """Stop the arbiter and its workers (this server's process group only)."""
        stop_gunicorn(self.process, self.log)
        self.process = None


@dataclass
class DemoGatewayServer:
    """``python -m gateway.demo`` (gunicorn) on 127.0.0.1, in its own process group.

    ``env`` holds its ``SLUICE_*`` settings; the port is chosen here.
    """

    env: dict[str, str]
    port: int = field(default_factory=free_port)
    log: Path = field(
        default_factory=lambda: Path(tempfile.mkstemp(prefix="sluice-gateway-")[1])
    )
    process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> DemoGatewayServer:
        env = {
            **os.environ,
            "SLUICE_GATEWAY_HOST": "127.0.0.1",
            "SLUICE_GATEWAY_PORT": str(self.port),
            "SLUICE_GATEWAY_LOG_LEVEL": "WARNING",
            **self.env,
        }
        self.process = start_logged(
            [sys.executable, "-m", "gateway.demo"], env, self.log
        )
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Until a worker answers HTTP (gunicorn binds before its workers boot)."""
        deadline = time.monotonic() + timeout
        while True:
            if _answers_http(f"{self.url}/healthz", deadline, only_2xx=True):
                return
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(
                    f"the demo gateway did not start:\n{self.log.read_text()[-3000:]}"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM to its process group: gunicorn stops its workers gracefully."""
        stop_gunicorn(self.process, self.log)
        self.process = None


def _answers_http(url: str, deadline: float, *, only_2xx: bool = False) -> bool:
    """Whether an HTTP server answers ``url`` before ``deadline`` (monotonic): a
    connection accepted by a server still booting waits for it that long, not less."""
    wait = max(1.0, deadline - time.monotonic())
    try:
        urllib.request.urlopen(url, timeout=wait).close()
    except urllib.error.HTTPError:
        return not only_2xx  # a worker answered, with an error status
    except OSError:  # refused (not bound yet), reset, or no answer in time
        return False
    return True


def stop_gunicorn(process: subprocess.Popen | None, log: Path) -> None:
    """SIGTERM to a gunicorn's process group (its arbiter stops the workers
    gracefully), SIGKILL after 20 s; then its log goes."""
    if process is not None and process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    log.unlink(missing_ok=True)


def start_logged(
    command: list[str], env: dict[str, str], log: Path
) -> subprocess.Popen:
    """Start ``command`` from the repository in a process group of its own (so that
    :func:`stop_gunicorn` reaches its workers), its output into ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(
            command,
            env=env,
            cwd=ROOT,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
