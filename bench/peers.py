"""Sluice's client against its peers, side by side in one interpreter.

Runs in a gateway's environment, not the control plane's: ``bench/peers_env.py``
makes ``var/bench/peers-venv`` with the client (``./client[hiredis,service]``) and
alisaifee/limits (pinned in ``bench/peers-requirements.txt``), whose import name
``limits`` the control plane's app would otherwise shadow. On a private
redis-server, for a random tenant among 10,000 (and an IP, a user):

* sync, for policies of 1, 2 and 3 limits: the floor (EVALSHA over a bare socket
  and hiredis' parser), bare redis-py ``evalsha`` of Sluice's script with the very
  keys and ARGV the client sends (prepared beforehand), ``Limiter.decide``, and
  alisaifee/limits' sliding window counter and moving window, one hit per limit;
* asyncio at 1, 16 and 64 tasks, 2 limits: bare ``redis.asyncio`` evalsha, and
  ``AsyncLimiter.decide`` auto-pipelined and not;
* the decision service (``sluice-decide``, gRPC) at 1, 16 and 64 callers.

Variants run in interleaved blocks, ``--repeats`` times, their order turned
around every repeat; ratios are taken within each repeat against bare redis-py.
Beside each: the Redis server's CPU per decision (``INFO commandstats``, reset
before each block). Prints figures, never asserts on time. Usage::

    var/bench/peers-venv/bin/python bench/peers.py [--ops 3000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import socket
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # last: alisaifee's ``limits`` must win over the app's

import grpc  # noqa: E402
import redis  # noqa: E402
import redis.asyncio  # noqa: E402
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2  # noqa: E402
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc  # noqa: E402
from hiredis import Reader  # noqa: E402

import limits  # noqa: E402  (alisaifee/limits)
from limits import RateLimitItemPerSecond, storage, strategies  # noqa: E402
from sluice import (  # noqa: E402
    ALL_ROUTES,
    DEFAULT_SCOPE,
    AsyncLimiter,
    Bundle,
    Dimension,
    Limit,
    Limiter,
    Policy,
    Route,
    Rules,
    Snapshot,
)
from sluice.bucket import SCRIPT, connect, connect_async  # noqa: E402
from sluice.scripts import pack_evalsha  # noqa: E402
from tests.client.protocol_server import ProtocolServer  # noqa: E402
from tests.gateways.servers import DecisionService  # noqa: E402
from tests.servers import RedisServer  # noqa: E402

TENANTS = 10_000
DIMENSIONS = (Dimension.TENANT, Dimension.IP, Dimension.USER)
TASKS = (1, 16, 64)
Request = tuple[str, str, str]  #: tenant, ip, user
Block = Callable[[list[Request]], list[int]]  #: runs requests, returns ns latencies


def snapshot_of(count: int) -> Snapshot:
    """A default policy of ``count`` limits (tenant, IP, user) that admits everything."""
    buckets = tuple(Limit(d, 1_000_000, 1, 1_000_000) for d in DIMENSIONS[:count])
    rules = Rules(
        tiers={"pro": "Pro"},
        tenants={f"t{n}": "pro" for n in range(TENANTS)},
        routes={"search": Route("search", ("GET",), "/v1/search")},
        policies=(Policy(DEFAULT_SCOPE, ALL_ROUTES, buckets),),
    )
    now = datetime.now(UTC)
    return Snapshot.build(
        version=1, parent=None, published_at=now, effective_at=now, rules=rules
    )


def random_requests(count: int, seed: int) -> list[Request]:
    rng = random.Random(seed)
    return [
        (
            f"t{rng.randrange(TENANTS)}",
            f"10.{rng.randrange(250)}.0.1",
            f"u{rng.randrange(999)}",
        )
        for _ in range(count)
    ]


def timed(call: Callable[[Request], object]) -> Block:
    def block(batch: list[Request]) -> list[int]:
        clock, latencies = time.perf_counter_ns, []
        for request in batch:
            began = clock()
            call(request)
            latencies.append(clock() - began)
        return latencies

    return block


class Floor:
    """EVALSHA over a bare socket and hiredis' parser: the round trip and little else."""

    def __init__(self, port: int, sha: str) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = Reader()
        self.head = b"$7\r\nEVALSHA\r\n$40\r\n" + sha.encode() + b"\r\n"

    def __call__(self, keys: list[str], args: tuple[bytes, ...]) -> object:
        self.sock.sendall(pack_evalsha(self.head, keys, args))
        while (reply := self.reader.gets()) is False:
            self.reader.feed(self.sock.recv(65536))
        return reply


def sync_variants(url: str, port: int, limits_count: int) -> dict[str, Block]:
    limiter = Limiter(connect(url, timeout=0.5), snapshot_of(limits_count))
    raw = connect(url, timeout=0.5)
    sha = raw.script_load(SCRIPT)
    floor = Floor(port, sha)
    sent: dict[Request, tuple[list[str], tuple[bytes, ...]]] = {}

    def what_the_limiter_sends(request: Request) -> tuple[list[str], tuple[bytes, ...]]:
        if request not in sent:  # prepared once, outside the timed call
            tenant, ip, user = request
            _, prepared = limiter.prepare("search", None, None, tenant, user, None, ip)
            sent[request] = (prepared.keys, prepared.plan.args)
        return sent[request]

    def prepared(run: Callable[[list[str], tuple[bytes, ...]], object]) -> Block:
        def block(batch: list[Request]) -> list[int]:
            calls = [what_the_limiter_sends(request) for request in batch]
            clock, latencies = time.perf_counter_ns, []
            for keys, args in calls:
                began = clock()
                run(keys, args)
                latencies.append(clock() - began)
            return latencies

        return block

    items = [RateLimitItemPerSecond(1_000_000) for _ in range(limits_count)]
    store = storage.RedisStorage(url)

    def peer(strategy: strategies.RateLimiter) -> Block:
        return timed(
            lambda r: [
                strategy.hit(item, "search", s)
                for item, s in zip(items, r, strict=False)
            ]
        )

    return {
        "floor: bare socket EVALSHA": prepared(floor),
        "bare redis-py evalsha": prepared(
            lambda k, a: raw.evalsha(sha, len(k), *k, *a)
        ),
        "Limiter.decide": timed(
            lambda r: limiter.decide(route="search", tenant=r[0], ip=r[1], user=r[2])
        ),
        "limits: sliding window counter": peer(
            strategies.SlidingWindowCounterRateLimiter(store)
        ),
        "limits: moving window": peer(strategies.MovingWindowRateLimiter(store)),
    }


def interleaved(
    variants: dict[str, Block], admin: redis.Redis, ops: int, repeats: int
) -> dict[str, dict[str, list[float]]]:
    """µs per decision, p99 µs and Redis µs per decision of each variant, per repeat."""
    pending = iter(random_requests(ops * repeats * len(variants) + ops, seed=11))
    for block in variants.values():  # warm up: connections, scripts, caches
        block([next(pending) for _ in range(ops // 10 or 1)])
    figures: dict[str, dict[str, list[float]]] = {
        name: {"us": [], "p99": [], "redis": []} for name in variants
    }
    names = list(variants)
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else reversed(names):
            batch = [next(pending) for _ in range(ops)]
            admin.config_resetstat()
            latencies = sorted(variants[name](batch))
            stats = admin.info("commandstats")
            busy = sum(v["usec"] for k, v in stats.items() if k.startswith("cmdstat_"))
            figures[name]["us"].append(statistics.fmean(latencies) / 1000)
            figures[name]["p99"].append(latencies[int(0.99 * len(latencies))] / 1000)
            figures[name]["redis"].append(busy / ops)
    return figures


def spread(values: list[float], digits: int = 1) -> str:
    return (
        f"{statistics.median(values):.{digits}f} "
        f"[{min(values):.{digits}f} .. {max(values):.{digits}f}]"
    )


def print_table(
    title: str, figures: dict[str, dict[str, list[float]]], base: str, *, per: str
) -> None:
    print(f"\n### {title}\n")
    print(f"| variant | µs per {per} | x {base} | p99 µs | Redis CPU µs per {per} |")
    print("|---|---|---|---|---|")
    for name, row in figures.items():
        ratios = [a / b for a, b in zip(row["us"], figures[base]["us"], strict=True)]
        print(
            f"| {name} | {spread(row['us'])} | {spread(ratios, 2)} | "
            f"{spread(row['p99'])} | {spread(row['redis'])} |"
        )


async def closed_loop(
    call: Callable[[Request], Awaitable[object]], tasks: int, batch: list[Request]
) -> tuple[float, list[int]]:
    """µs of wall time per decision for ``tasks`` coroutines sharing ``batch``, and
    each call's latency (ns)."""
    pending, latencies, clock = iter(batch), [], time.perf_counter_ns

    async def worker() -> None:
        for request in pending:
            began = clock()
            await call(request)
            latencies.append(clock() - began)

    began = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(tasks)))
    return (time.perf_counter() - began) / len(batch) * 1e6, sorted(latencies)


async def _interleaved_async(
    variants: dict[str, Callable[[Request], Awaitable[object]]],
    admin: redis.Redis,
    tasks: int,
    pending,
    ops: int,
    repeats: int,
) -> dict[str, dict[str, list[float]]]:
    """Wall µs per decision and Redis µs per decision, per repeat, variants interleaved."""
    figures = {name: {"us": [], "p99": [], "redis": []} for name in variants}
    names = list(variants)
    for repeat in range(repeats):
        for name in names if repeat % 2 == 0 else reversed(names):
            admin.config_resetstat()
            batch = [next(pending) for _ in range(ops)]
            wall, latencies = await closed_loop(variants[name], tasks, batch)
            stats = admin.info("commandstats")
            busy = sum(v["usec"] for k, v in stats.items() if k.startswith("cmdstat_"))
            figures[name]["us"].append(wall)
            figures[name]["redis"].append(busy / ops)
            figures[name]["p99"].append(latencies[int(0.99 * len(latencies))] / 1000)
    return figures


async def asyncio_part(url: str, admin: redis.Redis, ops: int, repeats: int) -> None:
    snapshot = snapshot_of(2)
    sync = Limiter(connect(url, timeout=0.5), snapshot)
    sent = {}
    requests_ = random_requests(ops * repeats * 3 * len(TASKS) + ops, seed=13)
    for tenant, ip, user in set(requests_):
        _, prepared = sync.prepare("search", None, None, tenant, user, None, ip)
        sent[(tenant, ip, user)] = (prepared.keys, prepared.plan.args)
    raw = redis.asyncio.Redis.from_url(url, socket_timeout=0.5)
    sha = await raw.script_load(SCRIPT)
    pipelined = AsyncLimiter(connect_async(url, timeout=0.5), snapshot)
    unbatched = AsyncLimiter(
        connect_async(url, timeout=0.5), snapshot, pipelining=False
    )

    async def bare(request: Request) -> object:
        keys, args = sent[request]
        return await raw.evalsha(sha, len(keys), *keys, *args)

    def decide(limiter: AsyncLimiter) -> Callable[[Request], Awaitable[object]]:
        return lambda r: limiter.decide(route="search", tenant=r[0], ip=r[1], user=r[2])

    variants = {
        "bare redis.asyncio evalsha": bare,
        "AsyncLimiter.decide, auto-pipelined": decide(pipelined),
        "AsyncLimiter.decide, pipelining off": decide(unbatched),
    }
    pending = iter(requests_)
    for call in variants.values():
        await closed_loop(call, 16, [next(pending) for _ in range(ops // 10)])
    for tasks in TASKS:
        figures = await _interleaved_async(
            variants, admin, tasks, pending, ops, repeats
        )
        print_table(
            f"asyncio, {tasks} task{'s' if tasks > 1 else ''}, 2 limits (µs of wall "
            "time per decision: its inverse is decisions per second)",
            figures,
            "bare redis.asyncio evalsha",
            per="decision",
        )
    await pipelined.aclose()
    await unbatched.aclose()
    await raw.aclose()


async def grpc_part(url: str, admin: redis.Redis, ops: int, repeats: int) -> None:
    """The decision service over gRPC against the same decisions made in process."""
    snapshot = snapshot_of(2)
    control_plane = ProtocolServer().start()
    control_plane.serve(Bundle(snapshot))
    workdir = Path(tempfile.mkdtemp(prefix="sluice-peers-"))
    service = DecisionService(
        control_plane.url.removesuffix("/api/v1/snapshot"),
        control_plane.token,
        url,
        workdir,
        extra=("--no-events",),
    ).start()
    service.wait_version(1)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}")
    stub = rls_pb2_grpc.RateLimitServiceStub(channel)
    entry = ratelimit_pb2.RateLimitDescriptor.Entry
    in_process = AsyncLimiter(connect_async(url, timeout=0.5), snapshot)

    async def over_grpc(request: Request) -> object:
        tenant, ip, user = request
        descriptor = ratelimit_pb2.RateLimitDescriptor(
            entries=[
                entry(key="route", value="search"),
                entry(key="tenant", value=tenant),
                entry(key="user", value=user),
                entry(key="remote_address", value=ip),
            ]
        )
        return await stub.ShouldRateLimit(
            rls_pb2.RateLimitRequest(domain="sluice", descriptors=[descriptor])
        )

    async def decide(request: Request) -> object:
        return await in_process.decide(
            route="search", tenant=request[0], ip=request[1], user=request[2]
        )

    variants = {
        "AsyncLimiter.decide, in process": decide,
        "sluice-decide over gRPC": over_grpc,
    }
    pending = iter(random_requests(ops * repeats * 2 * len(TASKS) + ops, seed=17))
    try:
        for call in variants.values():
            await closed_loop(call, 16, [next(pending) for _ in range(ops // 10)])
        for tasks in TASKS:
            figures = await _interleaved_async(
                variants, admin, tasks, pending, ops, repeats
            )
            print_table(
                f"the decision service, {tasks} caller{'s' if tasks > 1 else ''}, 2 limits",
                figures,
                "AsyncLimiter.decide, in process",
                per="decision",
            )
    finally:
        await channel.close()
        await in_process.aclose()
        service.stop()
        control_plane.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ops", type=int, default=3000, help="decisions per block")
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    if "site-packages" not in (limits.__file__ or ""):
        sys.exit(f"bench/peers.py needs alisaifee/limits, found {limits.__file__}")
    server = RedisServer().start()
    admin = redis.Redis.from_url(server.url)
    try:
        print("## The client against its peers (bench/peers.py)\n")
        print(
            f"python {sys.version.split()[0]}, redis-py {redis.__version__}, "
            f"limits {limits.__version__}; {options.ops} decisions per block, "
            f"{options.repeats} repeats, interleaved; medians [min .. max]"
        )
        for count in (1, 2, 3):
            variants = sync_variants(server.url, server.port, count)
            figures = interleaved(variants, admin, options.ops, options.repeats)
            print_table(
                f"sync, {count} limit{'s' if count > 1 else ''} (limits: {count} hit{'s' if count > 1 else ''})",
                figures,
                "bare redis-py evalsha",
                per="decision",
            )
        asyncio.run(asyncio_part(server.url, admin, options.ops, options.repeats))
        asyncio.run(grpc_part(server.url, admin, options.ops, options.repeats))
    finally:
        server.cleanup()


if __name__ == "__main__":
    main()
