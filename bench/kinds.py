"""Each limit kind against GCRA in one run: decision time, and Redis memory per active key.

Starts its own redis-server on a free loopback port. Two rule sets hold one
limit per tenant on one route, admitting everything the bench sends: GCRA
(``100 / h``, a billion deep: a charged key lives 36 s) and a sliding
window (``1,000,000,000 / h``). For each, in A B A B blocks interleaved in one process:

- ``decide``: ``Limiter.decide`` for a random tenant among 10,000 (the round
  trip included: what a gateway pays);
- ``evalsha``: a bare redis-py ``evalsha`` of the token-bucket script with that
  kind's keys and arguments (the script's own cost on Redis, and the round trip).

Then memory: a flushed Redis, one decision for each of 10,000 tenants, and
``INFO memory``'s ``used_memory`` growth divided by the keys written, per kind;
``MEMORY USAGE`` of one key too, and Redis's own CPU time per EVALSHA over
those decisions (``INFO commandstats``: the script's cost without the round trip). Prints figures; never asserts anything.
Usage (see docs/benchmarks.md, "Issue 26")::

    PYTHONPATH=client .venv/bin/python bench/kinds.py [--ops 3000] [--repeats 5] [--redis-cpu 1]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import redis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.servers import start_redis, stop_redis
from sluice import Dimension, Limit, Limiter, Policy, Route, Rules, Snapshot
from sluice.bucket import SCRIPT, connect
from sluice.model import SlidingWindow
from sluice.quota import RateLimit

TENANTS = 10_000
HUGE = 1_000_000_000
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def snapshot(limit: RateLimit) -> Snapshot:
    """One route, ``limit`` per tenant on it, tenants t0 .. t9999 of one tier."""
    rules = Rules(
        tiers={"free": "Free"},
        tenants={f"t{i}": "free" for i in range(TENANTS)},
        routes={"search": Route("search", ("GET",), "/v1/search")},
        policies=(Policy("default", "search", (limit,)),),
    )
    return Snapshot.build(
        version=1, parent=None, published_at=_EPOCH, effective_at=_EPOCH, rules=rules
    )


def kinds() -> dict[str, Snapshot]:
    return {
        # 100 / h, burst as deep as the window: a charged key lives 36 s (memory)
        "gcra": snapshot(Limit(Dimension.TENANT, 100, 3600, HUGE)),
        "sliding_window": snapshot(SlidingWindow(Dimension.TENANT, HUGE, 3600)),
    }


def _decide(limiter: Limiter) -> Callable[[str], object]:
    return lambda tenant: limiter.decide(route="search", tenant=tenant)


def _evalsha(limiter: Limiter, client: redis.Redis) -> Callable[[str], object]:
    sha = client.script_load(SCRIPT)
    engine = limiter.engine()  # the keys and ARGV the limiter sends, made beforehand
    keys, args = {}, ()
    for i in range(TENANTS):
        prepared = engine.prepare(
            now=time.time(),
            route="search",
            method=None,
            path=None,
            tenant=f"t{i}",
            user=None,
            api_key=None,
            ip=None,
        )
        keys[f"t{i}"], args = prepared.keys, prepared.plan.args

    def call(tenant: str) -> object:
        held = keys[tenant]
        return client.evalsha(sha, len(held), *held, *args)

    return call


def block(call: Callable[[str], object], tenants: list[str]) -> float:
    """µs per call over ``tenants``."""
    started = time.perf_counter()
    for tenant in tenants:
        call(tenant)
    return (time.perf_counter() - started) / len(tenants) * 1e6


def speed(url: str, ops: int, repeats: int) -> None:
    client = redis.Redis.from_url(url)
    limiters = {
        name: Limiter(connect(url, timeout=1.0), snap, timeout=1.0)
        for name, snap in kinds().items()
    }
    calls = {}
    for name, limiter in limiters.items():
        calls[f"{name} decide"] = _decide(limiter)
        calls[f"{name} evalsha"] = _evalsha(limiter, client)
    rng = random.Random(26)
    times: dict[str, list[float]] = {name: [] for name in calls}
    for _ in range(repeats):
        for name, call in calls.items():
            tenants = [f"t{rng.randrange(TENANTS)}" for _ in range(ops)]
            times[name].append(block(call, tenants))
    print(f"{'measure':28} {'median µs':>10} {'min':>8} {'max':>8}")
    for name, values in times.items():
        print(
            f"{name:28} {statistics.median(values):10.1f} "
            f"{min(values):8.1f} {max(values):8.1f}"
        )
    for what in ("decide", "evalsha"):
        ratios = [
            s / g
            for s, g in zip(
                times[f"sliding_window {what}"], times[f"gcra {what}"], strict=True
            )
        ]
        print(
            f"sliding / gcra, {what}: median {statistics.median(ratios):.3f} "
            f"[{min(ratios):.3f} .. {max(ratios):.3f}] over {repeats} pairs"
        )


def memory(url: str, repeats: int) -> None:
    client = redis.Redis.from_url(url)
    limiters = {
        name: Limiter(connect(url, timeout=1.0), snap, timeout=1.0)
        for name, snap in kinds().items()
    }
    cpu: dict[str, list[float]] = {name: [] for name in limiters}
    per_key: dict[str, list[float]] = {name: [] for name in limiters}
    usage: dict[str, int] = {}
    for _ in range(repeats):  # the kinds alternated: A B A B
        for name, limiter in limiters.items():
            limiter.decide(route="search", tenant="t0")  # scripts loaded, pools made
            client.flushdb()
            client.config_resetstat()
            before = client.info("memory")["used_memory"]
            for i in range(TENANTS):  # each key's first charge: the script's most work
                limiter.decide(route="search", tenant=f"t{i}")
            grown = client.info("memory")["used_memory"] - before
            stats = client.info("commandstats")["cmdstat_evalsha"]
            cpu[name].append(stats["usec_per_call"])
            per_key[name].append(grown / client.dbsize())
            usage[name] = client.memory_usage(next(client.scan_iter(count=100)))
    for name, values in per_key.items():
        print(
            f"{name:16} {TENANTS} keys: median {statistics.median(values):6.1f} bytes "
            f"per key (used_memory) [{min(values):.1f} .. {max(values):.1f}], "
            f"MEMORY USAGE of one: {usage[name]} bytes"
        )
    ratios = [s / g for s, g in zip(cpu["sliding_window"], cpu["gcra"], strict=True)]
    for name, values in cpu.items():
        print(
            f"{name:16} Redis CPU per EVALSHA: median {statistics.median(values):.2f} µs "
            f"[{min(values):.2f} .. {max(values):.2f}]"
        )
    print(
        f"sliding / gcra, Redis CPU: median {statistics.median(ratios):.3f} "
        f"[{min(ratios):.3f} .. {max(ratios):.3f}] over {repeats} pairs"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--redis-cpu", type=int, default=None)
    options = parser.parse_args()
    process, port, workdir = start_redis(options.redis_cpu)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        speed(url, options.ops, options.repeats)
        memory(url, options.repeats)
    finally:
        stop_redis(process, workdir)


if __name__ == "__main__":
    main()
