"""Hot keys: leases, shards and the reject cache on one hot key, and the overshoot of leases.

Starts its own redis-server on a free loopback port. Prints figures; never
asserts anything. Usage (see docs/benchmarks.md)::

    .venv/bin/python bench/hotkeys.py [--ops 3000] [--repeats 3] [--gateways 4] [--seconds 3]

1. One hot key, one process, A B C interleaved: plain, leased (100 tokens a
   lease), sharded (8 keys). Decisions/s, latency, and Redis calls per decision
   (script calls counted by Redis itself: INFO commandstats).
2. An abusive client on an exhausted bucket: reject cache on vs off.
3. Overshoot: ``--gateways`` processes hammer one bucket (2,000/s, burst 200),
   with and without leases of 50; admitted in total against burst + rate x
   elapsed, and the most admitted in any 1 s (and 0.1 s) against burst + rate x
   that time. "Primed": each gateway takes a lease, then all wait until the
   bucket is full again and hammer: the worst case leases allow.
"""

from __future__ import annotations

import argparse
import bisect
import multiprocessing
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.servers import start_redis, stop_redis
from sluice import Limiter, Snapshot
from tests.client.factories import limit, policy, rules, snapshot

BIG = 10_000_000  #: a limit the benchmark never reaches
RATE, BURST, LEASE = 2_000, 200, 50  #: the bucket of the overshoot runs
LEASE_MS = 5_000  #: long enough for primed leases to outlive the start-up wait


def hot_rules(**options: Any) -> Snapshot:
    return snapshot(
        rules(policy("default", "*", limit("tenant", BIG, 1, BIG, **options)))
    )


def script_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return sum(v["calls"] for k, v in stats.items() if k.startswith("cmdstat_eval"))


def run(limiter: Limiter, ops: int, tenant: str = "acme") -> tuple[float, float, float]:
    """(decisions/s, p50 µs, p99 µs) of ``ops`` decisions for one tenant."""
    latencies, clock = [], time.perf_counter_ns
    began = clock()
    for _ in range(ops):
        t0 = clock()
        limiter.decide(route="search", tenant=tenant)
        latencies.append(clock() - t0)
    seconds = (clock() - began) / 1e9
    latencies.sort()
    return ops / seconds, latencies[ops // 2] / 1000, latencies[ops * 99 // 100] / 1000


def measure(variants: dict[str, Limiter], client: redis.Redis, ops: int, repeats: int):
    results: dict[str, list[tuple[float, ...]]] = {name: [] for name in variants}
    for repeat in range(repeats):
        order = list(variants.items())
        for name, limiter in order if repeat % 2 == 0 else reversed(order):
            before = script_calls(client)
            rate, p50, p99 = run(limiter, ops)
            results[name].append(
                (rate, p50, p99, (script_calls(client) - before) / ops)
            )
    print(
        f"  {'variant':10} {'decisions/s':>24} {'p50 µs':>20} {'p99 µs':>22} {'calls/decision':>16}"
    )
    for name, rows in results.items():
        cells = [spread([row[i] for row in rows], 3 if i == 3 else 1) for i in range(4)]
        print(
            f"  {name:10} {cells[0]:>24} {cells[1]:>20} {cells[2]:>22} {cells[3]:>16}"
        )


def spread(values: list[float], digits: int) -> str:
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f} .. {max(values):.{digits}f}]"


def hammer(
    url: str,
    raw: bytes,
    seconds: float,
    prime: bool,
    ready: Any,
    start: Any,
    results: Any,
) -> None:
    """One gateway process: decide on the hot key until the deadline; report admit times.

    ``prime``: take one decision (and so a lease) on the hot key before the start.
    """
    limiter = Limiter(url, Snapshot.from_bytes(raw), timeout=1.0, reject_cache=False)
    limiter.decide(route="search", tenant="warmup")
    admitted = []
    if prime and limiter.decide(route="search", tenant="acme").allowed:
        admitted.append(time.monotonic())
    ready.put(True)
    start.wait()
    deadline = time.monotonic() + seconds
    while (now := time.monotonic()) < deadline:
        if limiter.decide(route="search", tenant="acme").allowed:
            admitted.append(now)  # CLOCK_MONOTONIC: one clock for every process
    results.put(admitted)


def overshoot(
    url: str,
    client: redis.Redis,
    gateways: int,
    seconds: float,
    lease: int,
    prime: bool,
) -> None:
    raw = snapshot(
        rules(
            policy(
                "default",
                "*",
                limit("tenant", RATE, 1, BURST, lease=lease, lease_ms=LEASE_MS),
            )
        )
    ).to_bytes()
    client.flushdb()
    context = multiprocessing.get_context("spawn")
    ready, start, results = context.Queue(), context.Event(), context.Queue()
    processes = [
        context.Process(
            target=hammer, args=(url, raw, seconds, prime, ready, start, results)
        )
        for _ in range(gateways)
    ]
    for process in processes:
        process.start()
    for _ in processes:
        ready.get(timeout=120)  # every gateway connected, warm, and primed
    time.sleep(0.3)  # the bucket refills (200 tokens at 2,000/s: 0.1 s); leases live on
    start.set()
    times = sorted(t for _ in processes for t in results.get(timeout=120))
    for process in processes:
        process.join()
    span = times[-1] - times[0]
    allowed = BURST + RATE * span
    pattern = "primed, after a pause" if prime else "steady"
    print(
        f"  lease {lease:3}, {pattern}: admitted {len(times):6} over {span:.2f} s, the bucket allows "
        f"{allowed:6.0f} ({len(times) / allowed:.3f}); bound on the overshoot "
        f"{gateways} x {lease} = {gateways * lease}"
    )
    for width in (1.0, 0.1):
        most = max(
            bisect.bisect_right(times, t + width) - i for i, t in enumerate(times)
        )
        limit_ = BURST + RATE * width
        print(
            f"             most admitted in any {width:g} s: {most:5} vs burst + rate x "
            f"{width:g} s = {limit_:5.0f} (overshoot {max(0, most - limit_):.0f})"
        )


def main() -> None:
    options = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    options.add_argument("--ops", type=int, default=3000)
    options.add_argument("--repeats", type=int, default=3)
    options.add_argument("--gateways", type=int, default=4)
    options.add_argument("--seconds", type=float, default=3.0)
    args = options.parse_args()
    process, port, workdir = start_redis(None)
    url, client = f"redis://127.0.0.1:{port}/0", redis.Redis(port=port)
    try:
        print("1. one hot key, one process (a limit it never reaches)")
        measure(
            {
                "plain": Limiter(url, hot_rules(), timeout=0.5),
                "leased": Limiter(url, hot_rules(lease=100), timeout=0.5),
                "sharded": Limiter(url, hot_rules(shards=8), timeout=0.5),
            },
            client, args.ops, args.repeats,
        )  # fmt: skip
        print("\n2. an abusive client on an exhausted bucket (1 a day, burst 1)")
        strict = snapshot(rules(policy("default", "*", limit("tenant", 1, 86400, 1))))
        cached, uncached = (
            Limiter(url, strict),
            Limiter(url, strict, reject_cache=False),
        )
        cached.decide(route="search", tenant="acme")
        measure({"cache": cached, "no cache": uncached}, client, args.ops, args.repeats)
        print(
            f"\n3. overshoot: {args.gateways} gateway processes, {args.seconds:g} s each"
        )
        for lease, prime in ((0, False), (LEASE, False), (LEASE, True)):
            overshoot(url, client, args.gateways, args.seconds, lease, prime)
    finally:
        client.close()
        stop_redis(process, workdir)


if __name__ == "__main__":
    main()
