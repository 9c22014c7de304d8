"""Snapshot polling: a simulated fleet of gateways against gunicorn serving the control plane.

Two measurements, on one gunicorn (sync workers) in one run:

1. **Throughput at saturation**, A B C D interleaved: a closed loop of
   ``--concurrency`` clients for ``--seconds`` per block on the trivial view
   (``/bench/ping``, same middleware, no query), the snapshot poll answered
   304, the poll answered 200 (gzip), and a bench view sending the same number
   of bytes as that 200 (is the 200 bound by bytes or by Python?).
2. **A fleet**: ``--gateways`` gateways polling every ``--interval`` s with
   ±20 % jitter, with at most ``--connections`` requests in flight: polls/s,
   p50/p99, errors. The gateways start holding the current bundle, so their
   polls are 304s but for one 200 each after a publish 3 s into the run.

Needs the bench database migrated and a private Redis (``bench/run.py``
prepares both). Polls the version the scale bench published (100k tenants);
run alone (``make bench BENCH_ARGS="--only polling"``) it publishes the rules
the database holds. Prints Markdown; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass, field

from bench.common import (
    bench_env,
    machine_line,
    manage,
    median,
    spread,
    table,
)
from bench.fleet import fleet, fleet_report, publish_later
from bench.httpclient import Block, Reply, get, poll_headers
from tests.servers import ControlPlaneServer


@dataclass
class Target:
    """One kind of request the bench sends."""

    name: str
    path: str
    headers: dict[str, str] = field(default_factory=dict)


async def closed_loop(
    port: int, target: Target, concurrency: int, seconds: float
) -> Block:
    """``concurrency`` clients sending ``target`` back to back for ``seconds``."""
    replies: list[Reply] = []
    deadline = time.perf_counter() + seconds

    async def client() -> None:
        while time.perf_counter() < deadline:
            replies.append(await get(port, target.path, target.headers))

    began = time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    return Block(replies, time.perf_counter() - began)


async def saturation(
    port, targets, concurrency, seconds, repeats
) -> dict[str, list[Block]]:
    """Blocks of every target, the order rotated each repeat (A B C D, B C D A, ...)."""
    await closed_loop(port, targets[0], concurrency, 1.0)  # warm every worker up
    results: dict[str, list[Block]] = {t.name: [] for t in targets}
    for repeat in range(repeats):
        shift = repeat % len(targets)
        for target in targets[shift:] + targets[:shift]:
            results[target.name].append(
                await closed_loop(port, target, concurrency, seconds)
            )
    return results


def saturation_rows(results: dict[str, list[Block]], reference: str) -> list[list[str]]:
    rows = []
    base = results[reference]
    for name, blocks in results.items():
        ratios = [b.per_s / r.per_s for b, r in zip(blocks, base, strict=True)]
        rows.append(
            [
                name,
                spread([b.per_s for b in blocks], 0),
                f"{spread(ratios, 2)}",
                spread([b.latency_ms(0.5) for b in blocks], 1),
                spread([b.latency_ms(0.99) for b in blocks], 1),
                str(sum(b.errors for b in blocks)),
                f"{median([b.per_s * (sum(r.size for r in b.replies) / max(1, len(b.replies))) / 2**20 for b in blocks]):.1f}",
            ]
        )
    return rows


def prepare(env: dict[str, str]) -> str:
    """A gateway token on the bench database (which must have a published version)."""
    return manage(env, "issue_token", "bench-fleet", "--gateway").strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--redis-url", required=True, help="the private Redis of the bench"
    )
    parser.add_argument("--port", type=int, default=8201)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument(
        "--server-cpus", default=None, help="taskset CPU list for gunicorn"
    )
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--seconds", type=float, default=4.0, help="per saturation block"
    )
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--gateways", type=int, default=1000)
    parser.add_argument("--interval", type=float, default=2.0)
    parser.add_argument("--fleet-seconds", type=float, default=30.0)
    parser.add_argument("--connections", type=int, default=64)
    options = parser.parse_args()
    env = bench_env(options.redis_url)
    token = prepare(env)
    server = ControlPlaneServer(
        env,
        options.port,
        options.workers,
        settings="bench.settings",
        cpus=options.server_cpus,
    ).start()
    try:
        asyncio.run(run(options, token, env))
    finally:
        server.stop()


async def run(options, token: str, env: dict[str, str]) -> None:
    port = options.port
    first = await get(port, "/api/v1/snapshot", poll_headers(token, "bench-probe"))
    if first.status == 503:  # nothing published: run without the scale bench
        manage(env, "bench_publish")
        first = await get(port, "/api/v1/snapshot", poll_headers(token, "bench-probe"))
    if first.status != 200:
        raise SystemExit(
            f"the snapshot endpoint answered {first.status}: nothing published?"
        )
    targets = [
        Target("trivial view", "/bench/ping"),
        Target(
            "poll → 304", "/api/v1/snapshot", poll_headers(token, "gw-sat", first.etag)
        ),
        Target("poll → 200 gzip", "/api/v1/snapshot", poll_headers(token, "gw-sat")),
        Target("same bytes, bench view", f"/bench/bytes?size={first.size}"),
    ]
    print(f"## Snapshot polling\n\n{machine_line()}")
    print(
        f"gunicorn {options.workers} sync workers (CPUs {options.server_cpus or 'any'}); "
        f"bundle {first.size:,} B gzip\n"
    )
    results = await saturation(
        port, targets, options.concurrency, options.seconds, options.repeats
    )
    print(
        f"### Throughput at saturation ({options.concurrency} clients, {options.seconds:g} s blocks, "
        f"{options.repeats} rotations; median [min .. max])\n"
    )
    print(
        table(
            [
                "request",
                "req/s",
                "÷ trivial view",
                "p50 ms",
                "p99 ms",
                "errors",
                "MiB/s",
            ],
            saturation_rows(results, "trivial view"),
        )
    )
    publish = asyncio.create_task(publish_later(env, 3.0))
    block = await fleet(
        port,
        token,
        first.etag,
        options.gateways,
        options.interval,
        options.fleet_seconds,
        options.connections,
    )
    print("\n### A fleet\n")
    print(fleet_report(block, options.gateways, options.interval))
    print(
        "\nA new version was published 3 s into the run "
        f"(the publish took {await publish:.1f} s): every gateway downloads it once (the 200s)."
    )


if __name__ == "__main__":
    main()
