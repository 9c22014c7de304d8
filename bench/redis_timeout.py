"""How long a healthy Redis takes to answer a decision on a busy machine: the default timeout.

    python -m bench.redis_timeout [--seconds 10] [--threads 4] [--hogs 2]

A limiter with a timeout nothing reaches (5 s) decides in ``--threads`` threads
against a private redis-server, first on the machine as it is, then beside
``--hogs`` CPU hogs per core (stress-ng, as ``.ci/loaded`` runs the suite). It
prints the latency of ``Limiter.decide`` (percentiles, and the share of calls
slower than each candidate timeout): a call slower than the limiter's timeout
is decided by the route's failure mode instead, so that share is the share of
degraded decisions a timeout would have caused with Redis perfectly healthy.
Never asserts; the figures go to ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

from bench.common import machine_line, percentile
from sluice import Limiter
from tests.client.factories import limit, policy, rules, snapshot
from tests.servers import RedisServer

CANDIDATES_MS = (5, 10, 25, 50, 100, 250)
RULES = snapshot(
    rules(
        policy(
            "tier:pro",
            "search",
            limit("tenant", 10**6, 1, 10**6),
            limit("user", 10**6, 1, 10**6),
        )
    )
)


def run(url: str, *, seconds: float, threads: int) -> list[float]:
    """Latencies (ms) of every decision ``threads`` threads made in ``seconds``."""
    limiter = Limiter(url, RULES, timeout=5.0)
    found: list[list[float]] = [[] for _ in range(threads)]
    stop = time.monotonic() + seconds

    def work(index: int) -> None:
        mine, clock = found[index], time.perf_counter
        while time.monotonic() < stop:
            began = clock()
            limiter.decide(route="search", tenant="acme", user=f"u{index}")
            mine.append((clock() - began) * 1000)

    workers = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return sorted(x for part in found for x in part)


@contextmanager
def hogs(per_core: int) -> Iterator[int]:
    """``per_core`` CPU hogs per core (stress-ng) while the block runs; 0: none."""
    count = per_core * len(os.sched_getaffinity(0))
    if not count or shutil.which("stress-ng") is None:
        yield 0
        return
    process = subprocess.Popen(
        ["stress-ng", "--cpu", str(count), "--cpu-method", "matrixprod", "--quiet"]
    )
    try:
        time.sleep(1.0)  # the hogs at work before the first decision
        yield count
    finally:
        process.terminate()
        process.wait()


def report(title: str, latencies: list[float], seconds: float) -> None:
    quantiles = ", ".join(
        f"p{label} {percentile(latencies, q):.2f}"
        for label, q in (("50", 0.5), ("99", 0.99), ("99.9", 0.999))
    )
    print(f"{title}: {len(latencies)} decisions ({len(latencies) / seconds:.0f}/s)")
    print(f"  latency ms: {quantiles}, max {latencies[-1]:.2f}")
    over = [
        f"{ms} ms {100 * sum(1 for x in latencies if x > ms) / len(latencies):.3f}%"
        for ms in CANDIDATES_MS
    ]
    print("  slower than a timeout of: " + ", ".join(over))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--hogs", type=int, default=2, help="CPU hogs per core")
    options = parser.parse_args()
    server = RedisServer().start()
    try:
        print(machine_line())
        report(
            "as it is",
            run(server.url, seconds=options.seconds, threads=options.threads),
            options.seconds,
        )
        with hogs(options.hogs) as count:
            latencies = run(
                server.url, seconds=options.seconds, threads=options.threads
            )
        report(f"beside {count} CPU hogs", latencies, options.seconds)
        print(machine_line())
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()
