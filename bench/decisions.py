"""Decisions per second and latency of the enforcement client, next to a raw EVALSHA.

Starts its own redis-server on a free loopback port, then for each scenario
(a random key among 10k, one hot key) and each API (sync, asyncio) runs A B A B
interleaved blocks: A is a bare redis-py ``evalsha`` of the same script with
the same keys and arguments, B is ``Limiter.decide``; the sync runs add C,
``Limiter.decide`` handing every decision to running ``DecisionEvents``; both
add R, ``Limiter.decide`` while a lowering is scheduled, so that every decision
rehearses it (``docs/rehearsal.md``). Prints figures; never asserts anything.
Usage (see docs/benchmarks.md)::

    .venv/bin/python bench/decisions.py [--ops 4000] [--repeats 5] [--redis-cpu 1]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
import redis.asyncio

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.load import load_rules
from bench.servers import start_redis, stop_redis
from sluice import (  # importable thanks to the path above
    AsyncLimiter,
    Bundle,
    DecisionEvents,
    Dimension,
    Limit,
    Limiter,
    Policy,
    Rules,
    Snapshot,
)
from sluice.bucket import SCRIPT, connect, connect_async

KEYS = 10_000


def bench_rules() -> Snapshot:
    """A realistic policy: per tenant and per IP, admitting everything the bench sends."""
    return load_rules(KEYS)


def rehearsing(snapshot: Snapshot) -> Bundle:
    """``snapshot`` in force and, scheduled years later, a version that halves the
    per-tenant limit of the searches (the per-IP one unchanged): each search
    decision rehearses it, with one key more."""
    rules = snapshot.rules
    policies = tuple(
        Policy(p.scope, p.route, tuple(_halved(limit) for limit in p.limits))
        if p.route == "search"
        else p
        for p in rules.policies
    )
    lowered = Snapshot.build(
        version=snapshot.version + 1,
        parent=snapshot.version,
        published_at=snapshot.published_at,
        effective_at=snapshot.effective_at.replace(year=2100),
        rules=Rules(rules.tiers, rules.tenants, rules.routes, policies),
    )
    return Bundle(snapshot, (lowered,))


def _halved(limit: Limit) -> Limit:
    if limit.dimension is not Dimension.TENANT:
        return limit
    return Limit(limit.dimension, limit.rate // 2, limit.period, limit.burst // 2)


def requests_for(scenario: str, count: int) -> list[tuple[str, str]]:
    rng = random.Random(7)
    if scenario == "hot key":
        return [("t1", "10.0.0.1")] * count
    return [
        (f"t{rng.randrange(KEYS)}", f"10.{rng.randrange(40)}.0.1") for _ in range(count)
    ]


def summary(latencies_ns: list[int], seconds: float) -> dict[str, float]:
    ordered = sorted(latencies_ns)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] / 1000

    return {
        "per_s": len(ordered) / seconds,
        "p50": pick(0.50),
        "p99": pick(0.99),
        "p999": pick(0.999),
        "mean": seconds / len(ordered) * 1e6,
    }


def run_sync(
    call: Callable[[str, str], object], requests: list[tuple[str, str]]
) -> dict[str, float]:
    latencies = []
    clock = time.perf_counter_ns
    began = clock()
    for tenant, ip in requests:
        t0 = clock()
        call(tenant, ip)
        latencies.append(clock() - t0)
    return summary(latencies, (clock() - began) / 1e9)


async def run_async(call, requests: list[tuple[str, str]]) -> dict[str, float]:
    latencies = []
    clock = time.perf_counter_ns
    began = clock()
    for tenant, ip in requests:
        t0 = clock()
        await call(tenant, ip)
        latencies.append(clock() - t0)
    return summary(latencies, (clock() - began) / 1e9)


def script_args(limiter: Limiter, requests: list[tuple[str, str]]) -> dict[Any, Any]:
    """The keys and ARGV the limiter sends for each request: what the raw variant sends."""
    args = {}
    for tenant, ip in set(requests):
        _, prepared = limiter.prepare("search", None, None, tenant, None, None, ip)
        args[(tenant, ip)] = (prepared.keys, prepared.plan.args)
    return args


def sync_variants(url: str, snapshot: Snapshot, requests: list[tuple[str, str]]):
    limiter = Limiter(url, snapshot, timeout=0.5)
    raw_client = connect(url, timeout=0.5)  # the limiter's connection settings
    sha = raw_client.script_load(SCRIPT)
    cache = script_args(limiter, requests)

    def raw(tenant: str, ip: str) -> object:
        keys, args = cache[(tenant, ip)]
        return raw_client.evalsha(sha, len(keys), *keys, *args)

    def client(tenant: str, ip: str) -> object:
        return limiter.decide(route="search", tenant=tenant, ip=ip)

    rehearsal = Limiter(url, rehearsing(snapshot), timeout=0.5)

    def rehearsed(tenant: str, ip: str) -> object:
        return rehearsal.decide(route="search", tenant=tenant, ip=ip)

    return raw, client, rehearsed


def events_variant(url: str, snapshot: Snapshot) -> tuple[Callable, DecisionEvents]:
    """``Limiter.decide`` with decision events, their flush thread running."""
    events = DecisionEvents(connect(url, timeout=0.5), gateway_id="bench").start()
    limiter = Limiter(url, snapshot, timeout=0.5, events=events)

    def evented(tenant: str, ip: str) -> object:
        return limiter.decide(route="search", tenant=tenant, ip=ip)

    return evented, events


def bench_sync(
    url, snapshot, scenario, ops, repeats
) -> dict[str, list[dict[str, float]]]:
    requests = requests_for(scenario, ops)
    raw, client, rehearsed = sync_variants(url, snapshot, requests)
    evented, events = events_variant(url, snapshot)
    variants = [
        ("raw", raw),
        ("client", client),
        ("events", evented),
        ("rehearse", rehearsed),
    ]
    for _, call in variants:
        run_sync(call, requests[:500])  # warm up
    results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in variants}
    stats = redis.Redis.from_url(url)
    for repeat in range(repeats):
        for name, call in variants if repeat % 2 == 0 else reversed(variants):
            stats.config_resetstat()
            figures = run_sync(call, requests)
            script = stats.info("commandstats").get("cmdstat_evalsha", {})
            figures["redis"] = script.get("usec_per_call", 0.0)  # Redis's own time
            results[name].append(figures)
    stats.close()
    events.stop()
    return results


def bench_async(
    url, snapshot, scenario, ops, repeats
) -> dict[str, list[dict[str, float]]]:
    requests = requests_for(scenario, ops)
    cache = script_args(Limiter(url, snapshot), requests)

    async def main() -> dict[str, list[dict[str, float]]]:
        limiter = AsyncLimiter(url, snapshot, timeout=0.5)
        raw_client = connect_async(url, timeout=0.5)
        sha = await raw_client.script_load(SCRIPT)

        async def raw(tenant: str, ip: str) -> object:
            keys, args = cache[(tenant, ip)]
            return await raw_client.evalsha(sha, len(keys), *keys, *args)

        async def client(tenant: str, ip: str) -> object:
            return await limiter.decide(route="search", tenant=tenant, ip=ip)

        rehearsal = AsyncLimiter(url, rehearsing(snapshot), timeout=0.5)

        async def rehearsed(tenant: str, ip: str) -> object:
            return await rehearsal.decide(route="search", tenant=tenant, ip=ip)

        order = [("raw", raw), ("client", client), ("rehearse", rehearsed)]
        for _, call in order:
            await run_async(call, requests[:500])  # warm up
        results: dict[str, list[dict[str, float]]] = {name: [] for name, _ in order}
        for repeat in range(repeats):
            for name, call in order if repeat % 2 == 0 else reversed(order):
                results[name].append(await run_async(call, requests))
        await raw_client.aclose()
        await limiter.aclose()
        await rehearsal.aclose()
        return results

    return asyncio.run(main())


def client_cpu(snapshot: Snapshot, ops: int, events: bool = False) -> float:
    """µs of client work per decision with Redis replaced by a canned reply."""
    sink = DecisionEvents(connect("redis://127.0.0.1:1"), gateway_id="b", capacity=ops)
    limiter = Limiter("redis://127.0.0.1:1", snapshot, events=sink if events else None)
    reply, requests = [1, 1, 1_000, 1, 1_000], requests_for("random key", ops)
    for tenant, ip in requests:  # warm the resolution cache, as a gateway has it
        limiter.prepare("search", None, None, tenant, None, None, ip)
    began = time.perf_counter()
    for tenant, ip in requests:
        engine, prepared = limiter.prepare("search", None, None, tenant, None, None, ip)
        limiter.record(tenant, engine.decision(prepared, reply))
    return (time.perf_counter() - began) / ops * 1e6


def spread(values: list[float], digits: int = 1) -> str:
    """Median [min .. max]."""
    low, mid, high = min(values), statistics.median(values), max(values)
    return f"{mid:8.{digits}f} [{low:.{digits}f} .. {high:.{digits}f}]"


def report(title: str, results: dict[str, list[dict[str, float]]]) -> None:
    print(f"\n{title}")
    print(
        f"  {'variant':8} {'decisions/s':>26} {'p50 µs':>24} {'p99 µs':>24} {'p99.9 µs':>26}"
    )
    for name, runs in results.items():
        cells = [spread([r[k] for r in runs]) for k in ("per_s", "p50", "p99", "p999")]
        print(f"  {name:8} {cells[0]:>26} {cells[1]:>24} {cells[2]:>24} {cells[3]:>26}")
    for upper, lower in (
        ("client", "raw"),
        ("events", "client"),
        ("rehearse", "client"),
    ):
        if upper not in results:
            continue
        pairs = list(zip(results[lower], results[upper], strict=True))
        ratios = [c["mean"] / r["mean"] for r, c in pairs]
        print(f"  {upper} / {lower} time per decision: {spread(ratios, 2)}")
        if upper == "rehearse":  # the mean drowns in a loaded machine's stalls
            medians = [c["p50"] / r["p50"] for r, c in pairs]
            print(f"  {upper} / {lower} p50: {spread(medians, 2)}")
    if all("redis" in r for runs in results.values() for r in runs):
        cells = ", ".join(
            f"{name} {spread([r['redis'] for r in runs]).strip()}"
            for name, runs in results.items()
        )
        print(f"  Redis µs per EVALSHA (INFO commandstats): {cells}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=4000, help="decisions per block")
    parser.add_argument(
        "--repeats", type=int, default=5, help="A/B pairs per scenario (≥ 3)"
    )
    parser.add_argument(
        "--redis-cpu", type=int, default=None, help="pin redis-server to this CPU"
    )
    options = parser.parse_args()
    if shutil.which("redis-server") is None:
        sys.exit("redis-server is not installed")
    process, port, workdir = start_redis(options.redis_cpu)
    url = f"redis://127.0.0.1:{port}/0"
    snapshot = bench_rules()
    try:
        print(
            f"python {sys.version.split()[0]}, redis-py {redis.__version__}, pid {os.getpid()}"
        )
        print(
            f"cpus allowed: {sorted(os.sched_getaffinity(0))}; ops per block {options.ops}"
        )
        pairs = [
            (client_cpu(snapshot, options.ops), client_cpu(snapshot, options.ops, True))
            for _ in range(7)  # interleaved: a noisy moment hits both alike
        ]
        plain, evented = zip(*pairs, strict=True)
        print(
            f"client CPU per decision (no Redis): {spread(list(plain), 2)} µs; "
            f"with events: {spread(list(evented), 2)} µs; "
            f"ratio {spread([e / p for p, e in pairs], 3)}"
        )
        for scenario in ("random key", "hot key"):
            report(
                f"sync, {scenario}",
                bench_sync(url, snapshot, scenario, options.ops, options.repeats),
            )
            report(
                f"asyncio, {scenario}",
                bench_async(url, snapshot, scenario, options.ops, options.repeats),
            )
    finally:
        stop_redis(process, workdir)


if __name__ == "__main__":
    main()
