"""A private redis-server for the benchmarks: a free loopback port, nothing on disk."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time

import redis

__all__ = ["start_redis", "stop_redis"]


def start_redis(cpu: int | None) -> tuple[subprocess.Popen[bytes], int, str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    workdir = tempfile.mkdtemp(prefix="sluice-bench-")
    command = ["redis-server", "--port", str(port), "--bind", "127.0.0.1"]
    command += ["--save", "", "--appendonly", "no", "--dir", workdir]
    if cpu is not None:
        command = ["taskset", "-c", str(cpu), *command]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
    client = redis.Redis(port=port)
    for _ in range(500):
        try:
            client.ping()
            break
        except redis.ConnectionError:
            time.sleep(0.01)
    return process, port, workdir


def stop_redis(process: subprocess.Popen[bytes], workdir: str) -> None:
    process.terminate()
    process.wait()
    shutil.rmtree(workdir, ignore_errors=True)
