"""A minimal asyncio HTTP/1.1 client for the polling bench, and gunicorn as a subprocess.

One connection per request, like ``urllib`` in ``SnapshotSource`` (and gunicorn's
sync workers close the connection after each response anyway). Hand-written so
the load generator spends as little of the machine's two CPUs as possible.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from bench.common import PYTHON, ROOT


@dataclass(frozen=True, slots=True)
class Reply:
    status: int  #: 0 when the request failed before a status line
    etag: str | None
    size: int  #: body bytes received
    seconds: float


async def get(
    port: int, path: str, headers: dict[str, str], *, timeout: float = 10.0
) -> Reply:
    """GET ``path`` on 127.0.0.1:``port``; never raises (status 0 on failure)."""
    began = time.perf_counter()
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    writer = None
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), timeout
        )
        writer.write(request)
        raw = await asyncio.wait_for(
            reader.read(-1), timeout
        )  # until the server closes
    except (OSError, TimeoutError):
        return Reply(0, None, 0, time.perf_counter() - began)
    finally:
        if writer is not None:
            writer.close()
    return _parse(raw, time.perf_counter() - began)


def _parse(raw: bytes, seconds: float) -> Reply:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        return Reply(0, None, 0, seconds)
    etag = None
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.lower() == "etag":
            etag = value.strip()
    return Reply(status, etag, len(body), seconds)


@dataclass
class Gunicorn:
    """gunicorn serving the control plane (bench settings) on 127.0.0.1:``port``."""

    env: dict[str, str]
    port: int
    workers: int = 4
    worker_class: str = "sync"
    cpus: str | None = None  #: taskset CPU list, e.g. "1"
    log: Path = field(default_factory=lambda: Path("/tmp/sluice-bench-gunicorn.log"))
    process: subprocess.Popen | None = None

    def start(self) -> Gunicorn:
        command = [PYTHON, "-m", "gunicorn", "controlplane.wsgi:application"]
        command += ["--bind", f"127.0.0.1:{self.port}", "--workers", str(self.workers)]
        command += ["--worker-class", self.worker_class, "--backlog", "2048"]
        command += ["--log-level", "warning"]
        if self.cpus is not None:
            command = ["taskset", "-c", self.cpus, *command]
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                command,
                env=self.env,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.port}/bench/ping"
        while True:
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"gunicorn did not start:\n{self.log.read_text()[-3000:]}"
                    ) from None
                time.sleep(0.2)

    def stop(self) -> None:
        """Stop the arbiter and its workers (its own process group only)."""
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        self.process = None
