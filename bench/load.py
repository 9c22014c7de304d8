"""Decisions under load: several gateway processes against one Redis and a 3-master Cluster.

Each "gateway" is a process running ``Limiter.decide`` in ``--threads`` threads
on random tenants (``--keys`` of them, two limits per decision) for
``--seconds``; the reference in the same run is the same processes sending a
bare ``evalsha`` of the same script with the same keys. Reported: decisions/s
of all processes together, latency percentiles, and Redis memory per active
bucket (``INFO memory`` before and after, and ``MEMORY USAGE`` of sample keys).
Starts its own redis-server and cluster on free loopback ports. Prints Markdown.
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import threading
import time
from typing import Any

import redis

from bench.common import machine_line, percentile, spread, table
from sluice import Dimension, Limit, Limiter, Policy, Route, Rules, Snapshot
from sluice.bucket import SCRIPT, connect
from sluice.bundle import fallback_snapshot
from tests.servers import RedisClusterServers, RedisServer

VARIANTS = (
    "raw evalsha",
    "Limiter.decide",
)  #: raw: keys from the engine, then a bare evalsha


def load_rules(keys: int, *, hourly: bool = False) -> Snapshot:
    """Per tenant and per IP, generous enough to admit what the bench sends.

    ``hourly``: 100 per hour instead, so buckets live long enough to be counted.
    """
    rate, period, burst = (100, 3600, 100) if hourly else (1_000_000, 1, 1_000_000)
    limits = (
        Limit(Dimension.TENANT, rate, period, burst),
        Limit(Dimension.IP, rate, period, burst),
    )
    base = fallback_snapshot()
    rules = Rules(
        tiers={"pro": "Pro"},
        tenants={f"t{i}": "pro" for i in range(keys)},
        routes={"search": Route("search", ("GET",), "/v1/search")},
        policies=(Policy("default", "*", limits), Policy("tier:pro", "search", limits)),
    )
    return Snapshot.build(
        version=1,
        parent=None,
        published_at=base.published_at,
        effective_at=base.published_at,
        rules=rules,
    )


def gateway(
    url: str,
    cluster: bool,
    variant: str,
    keys: int,
    threads: int,
    seconds: float,
    seed: int,
    start: Any,
    results: Any,
) -> None:
    """One gateway process: ``threads`` threads deciding until the deadline."""
    client = connect(url, timeout=1.0, cluster=cluster)
    limiter = Limiter(client, load_rules(keys), timeout=1.0)
    sha = client.script_load(SCRIPT)
    latencies: list[int] = []
    degraded = [0]

    def work(rng: random.Random) -> None:
        clock = time.perf_counter_ns
        deadline = time.monotonic() + seconds
        local: list[int] = []
        while time.monotonic() < deadline:
            tenant, ip = f"t{rng.randrange(keys)}", f"10.{rng.randrange(250)}.0.1"
            t0 = clock()
            if variant == "raw evalsha":
                _, prepared = limiter.prepare(
                    "search", None, None, tenant, None, None, ip
                )
                client.evalsha(
                    sha, len(prepared.keys), *prepared.keys, *prepared.plan.args
                )
            else:
                degraded[0] += limiter.decide(
                    route="search", tenant=tenant, ip=ip
                ).degraded
            local.append(clock() - t0)
        latencies.extend(local)

    limiter.decide(route="search", tenant="t0", ip="10.0.0.1")  # connect first
    start.wait()
    pool = [
        threading.Thread(target=work, args=(random.Random(seed * 100 + i),))
        for i in range(threads)
    ]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    results.put((latencies, degraded[0]))


def run_block(url, cluster, variant, options) -> dict[str, float]:
    """All gateway processes for one block; returns decisions/s and percentiles (µs)."""
    context = multiprocessing.get_context("fork")
    start, results = context.Event(), context.Queue()
    processes = [
        context.Process(
            target=gateway,
            args=(
                url,
                cluster,
                variant,
                options.keys,
                options.threads,
                options.seconds,
                seed,
                start,
                results,
            ),
        )
        for seed in range(options.processes)
    ]
    for process in processes:
        process.start()
    time.sleep(0.5)
    began = time.perf_counter()
    start.set()
    gathered = [results.get(timeout=options.seconds + 60) for _ in processes]
    elapsed = time.perf_counter() - began
    for process in processes:
        process.join(timeout=30)
    latencies = sorted(v for batch, _ in gathered for v in batch)
    return {
        "per_s": len(latencies) / elapsed,
        "p50": percentile(latencies, 0.5) / 1000,
        "p99": percentile(latencies, 0.99) / 1000,
        "p999": percentile(latencies, 0.999) / 1000,
        "degraded": sum(d for _, d in gathered),
    }


def measure(url: str, cluster: bool, options) -> list[list[str]]:
    """A/B interleaved blocks of raw evalsha and Limiter.decide."""
    run_block(url, cluster, VARIANTS[1], options)  # warm-up: connections, slot maps
    results: dict[str, list[dict[str, float]]] = {v: [] for v in VARIANTS}
    for repeat in range(options.repeats):
        order = VARIANTS if repeat % 2 == 0 else VARIANTS[::-1]
        for variant in order:
            results[variant].append(run_block(url, cluster, variant, options))
    rows = []
    for variant, blocks in results.items():
        ratios = [
            b["per_s"] / r["per_s"]
            for b, r in zip(blocks, results["raw evalsha"], strict=True)
        ]
        rows.append(
            [variant]
            + [
                spread([b[k] for b in blocks], 0)
                for k in ("per_s", "p50", "p99", "p999")
            ]
            + [spread(ratios, 2), str(int(sum(b["degraded"] for b in blocks)))]
        )
    return rows


def memory_per_bucket(url: str, cluster: bool, buckets: int) -> str:
    """Bytes of Redis memory per bucket: INFO used_memory delta, and MEMORY USAGE of a sample."""
    client = connect(url, timeout=5.0, cluster=cluster)
    nodes = (
        [n.redis_connection for n in client.get_primaries()] if cluster else [client]
    )
    for node in nodes:
        node.flushdb()
    used = lambda: sum(n.info("memory")["used_memory"] for n in nodes)  # noqa: E731
    before = used()
    limiter = Limiter(client, load_rules(buckets // 2, hourly=True), timeout=5.0)
    for index in range(buckets // 2):  # two buckets per decision: tenant and IP
        limiter.decide(
            route="search",
            tenant=f"t{index}",
            ip=f"10.{index // 65536}.{index // 256 % 256}.{index % 256}",
        )
    after = used()
    keys = sum(n.dbsize() for n in nodes)
    sample = [k for n in nodes for k in n.scan(count=200)[1][:20]]
    usage = [client.memory_usage(k) for k in sample]
    return (
        f"{keys:,} buckets: INFO used_memory grew by {(after - before) / keys:.0f} B per bucket; "
        f"MEMORY USAGE of {len(usage)} sample keys: {spread(usage, 0)} B"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=4, help="gateway processes")
    parser.add_argument("--threads", type=int, default=4, help="threads per gateway")
    parser.add_argument("--seconds", type=float, default=4.0, help="per block")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keys", type=int, default=10_000, help="distinct tenants")
    parser.add_argument(
        "--buckets", type=int, default=100_000, help="for the memory figure"
    )
    options = parser.parse_args()
    print(f"## Decisions under load\n\n{machine_line()}")
    print(
        f"{options.processes} gateway processes x {options.threads} threads, {options.keys:,} tenants, "
        f"two limits per decision (tenant, IP), {options.seconds:g} s blocks, {options.repeats} A/B repeats; "
        "latencies in µs, median [min .. max].\n"
    )
    header = [
        "variant",
        "decisions/s",
        "p50 µs",
        "p99 µs",
        "p99.9 µs",
        "÷ raw",
        "degraded",
    ]
    single = RedisServer().start()
    try:
        print(
            f"### One Redis (redis-server {redis.Redis.from_url(single.url).info()['redis_version']})\n"
        )
        print(table(header, measure(single.url, False, options)))
        print(f"\nMemory: {memory_per_bucket(single.url, False, options.buckets)}\n")
    finally:
        single.cleanup()
    cluster = RedisClusterServers().start()
    try:
        print("### Redis Cluster, 3 masters\n")
        print(table(header, measure(cluster.url, True, options)))
        print(f"\nMemory: {memory_per_bucket(cluster.url, True, options.buckets)}\n")
    finally:
        cluster.cleanup()


if __name__ == "__main__":
    main()
