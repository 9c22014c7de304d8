"""A private redis-server that keeps nothing on disk."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

import redis

from controlplane.devservices.process import (
    START_TIMEOUT,
    Address,
    ServerProcess,
    StartFailed,
    polls,
)
from controlplane.preflight import redis_unreachable


@dataclass
class PrivateRedis:
    """A redis-server on ``address`` for ``url`` (the value of ``setting``).

    No snapshots, no append-only file: what it holds (caches, fleet reports, the
    decision stream, Celery's queue) is gone when it stops, as after a Redis restart.
    It runs in ``workdir``; its log is next to it (``var/redis-<port>.log``).
    Stopped with SIGTERM.
    """

    address: Address
    workdir: Path
    url: str
    setting: str = "REDIS_URL"
    name: str = "Redis"
    _server: ServerProcess = field(init=False)

    def __post_init__(self) -> None:
        self._server = ServerProcess(self.workdir.with_name(self.workdir.name + ".log"))

    def start(self) -> None:
        """Start redis-server."""
        binary = shutil.which("redis-server")
        if binary is None:
            raise StartFailed(
                self._failed(
                    "redis-server not found (Debian: apt-get install redis-server)"
                )
            )
        self.workdir.mkdir(parents=True, exist_ok=True)
        command = [binary, "--bind", *self.address.bind_addresses()]
        command += ["--port", str(self.address.port), "--dir", str(self.workdir)]
        command += ["--save", "", "--appendonly", "no", "--daemonize", "no"]
        self._server.spawn(command, cwd=self.workdir)

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Return once the server answers PING; StartFailed if it ends or time runs out."""
        client = redis.Redis(
            host=self.address.host, port=self.address.port, socket_connect_timeout=1
        )
        try:
            for _ in polls(timeout):
                if self._server.exited() is not None:
                    raise StartFailed(self._failed(self._server.reason()))
                try:
                    client.ping()
                    return
                except redis.ConnectionError:
                    continue
        finally:
            client.close()
        raise StartFailed(self._failed(f"no answer {timeout:g} s after starting"))

    def exited(self) -> int | None:
        """The redis-server exit status once it has ended; None while it runs."""
        return self._server.exited()

    def stop(self) -> None:
        """SIGTERM, and wait for it."""
        self._server.stop()

    def _failed(self, why: str) -> str:
        reason = f"nothing answered and a private Redis did not start: {why}; log: {self._server.log}"
        return redis_unreachable(self.url, reason, setting=self.setting)
