"""``sluice-decide --workers N``: N processes sharing the listening ports.

One Python process decides on one core at most, so the service runs one
worker per core by default. Each worker is a whole service (its own snapshot
polling, Redis connection and auto-pipeline, decision events, local buckets)
listening on the same ports with ``SO_REUSEPORT``: the kernel spreads the
gateways' connections over them. What that changes for an operator:

- a bounded fail-open (``open``) admits its bound per worker, so per
  ``sluice-decide`` it is N times the per-process figure
  (``docs/gateways/README.md``);
- a gateway that keeps few connections (Envoy opens one HTTP/2 connection per
  worker thread) reaches as many workers as it has connections at most.

The supervisor starts the workers, restarts one that dies (after a pause that
grows while they keep dying at once), and stops them all on SIGTERM or SIGINT.
Before starting any, it binds each port once without ``SO_REUSEPORT``, so a
port another process already holds is an error, not a silent share.
"""

from __future__ import annotations

import logging
import multiprocessing
import signal
import socket
import time
from collections.abc import Callable, Sequence
from multiprocessing.process import BaseProcess

__all__ = ["check_free", "listening_socket", "supervise"]

logger = logging.getLogger("sluice.service")

_QUICK_DEATH = 5.0  #: seconds: a worker dying sooner counts as a failed start
_GIVE_UP = 5  #: failed starts in a row before the supervisor gives up


def listening_socket(host: str, port: int, *, shared: bool) -> socket.socket:
    """A TCP socket listening on ``host:port``; ``shared``: with ``SO_REUSEPORT``."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if shared:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def check_free(addresses: Sequence[tuple[str, int]]) -> None:
    """Raise OSError when a port is taken (bound once without sharing, then closed)."""
    for host, port in addresses:
        listening_socket(host, port, shared=False).close()


def supervise(count: int, run: Callable[[int], None]) -> int:
    """Run ``run(index)`` in ``count`` processes until SIGTERM or SIGINT; the exit status."""
    context = multiprocessing.get_context("spawn")  # no grpc state crosses a fork
    stopping = False

    def stop(signum: int, _frame: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    workers: dict[int, tuple[BaseProcess, float]] = {}
    failed_starts = 0

    def start(index: int) -> None:
        process = context.Process(target=run, args=(index,), name=f"worker-{index}")
        process.start()
        workers[index] = (process, time.monotonic())

    for index in range(count):
        start(index)
    logger.info("service.workers: %d started", count)
    try:
        while not stopping:
            time.sleep(0.2)
            for index, (process, started) in list(workers.items()):
                if process.is_alive() or stopping:
                    continue
                quick = time.monotonic() - started < _QUICK_DEATH
                failed_starts = failed_starts + 1 if quick else 0
                logger.error(
                    "service.worker_died: worker %d (pid %s) exited with %s%s",
                    index,
                    process.pid,
                    process.exitcode,
                    "; restarting" if failed_starts < _GIVE_UP else "; giving up",
                )
                if failed_starts >= _GIVE_UP:
                    return 1
                time.sleep(min(0.1 * 2**failed_starts, 3.0))
                start(index)
    finally:
        for process, _ in workers.values():
            if process.is_alive():
                process.terminate()
        for process, _ in workers.values():
            process.join(timeout=10)
            if process.is_alive():
                process.kill()
    return 0
