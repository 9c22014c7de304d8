"""A worker process for the accuracy test: threads deciding on one key until a deadline."""

from __future__ import annotations

import threading
import time

from limits.enforcement import Limiter, Snapshot


def hammer(
    url: str, snapshot_bytes: bytes, threads: int, seconds: float, start, results
):
    """Wait for ``start``, then decide as fast as ``threads`` threads can for ``seconds``."""
    limiter = Limiter(url, Snapshot.from_bytes(snapshot_bytes), timeout=1.0)
    limiter.decide(route="search", tenant="warmup")  # connect before the clock starts
    counts = []

    def run():
        admitted = rejected = degraded = 0
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            decision = limiter.decide(route="search", tenant="acme")
            admitted += decision.allowed
            rejected += not decision.allowed
            degraded += decision.degraded
        counts.append((admitted, rejected, degraded))

    start.wait()
    workers = [threading.Thread(target=run) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    results.put(tuple(map(sum, zip(*counts, strict=True))))
