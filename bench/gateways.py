"""The decision service's speed, and what Envoy's rate-limit filter adds in front of an API.

Part 1: decisions per second of ``sluice-decide`` at 1, 16 and 64 concurrent
callers over gRPC (Envoy's RLS, a ``grpc.aio`` client) and over HTTP
(forward-auth, keep-alive connections), against the same decisions made in
process by the client (``AsyncLimiter``) in the same run, repeats interleaved.

Part 2: Envoy end to end (docs/gateways/envoy.yaml) with the rate-limit filter
and the same Envoy without it, in front of an upstream Envoy that answers
directly: requests per second at 64 connections, then the p50 / p99 latency of
each at a fixed rate of 50 % of the filtered Envoy's capacity, and the
difference (what the filter adds). Everything runs on this machine's cores:
the load generator, both Envoys, the service and Redis share them.

Prints figures, never asserts on time. Usage (docs/benchmarks.md)::

    .venv/bin/python -m bench.gateways [--seconds 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import yaml
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

from bench.common import machine_line, percentile, spread
from bench.load import load_rules
from sluice import AsyncLimiter, Bundle
from sluice.bucket import connect_async
from tests.client.protocol_server import ProtocolServer
from tests.gateways import servers
from tests.gateways.load import HttpConnection
from tests.servers import RedisServer, free_port

TENANTS = 1000
CALLERS = (1, 16, 64)


def tenant() -> str:
    return f"t{random.randrange(TENANTS)}"


# -- load: closed loops of ``callers`` coroutines for ``seconds`` ------------------


async def closed_loop(
    call: Callable[[], Awaitable[object]], callers: int, seconds: float
) -> float:
    """Calls per second of ``callers`` coroutines calling back to back for ``seconds``."""
    done = 0
    stop = time.perf_counter() + seconds

    async def caller() -> None:
        nonlocal done
        while time.perf_counter() < stop:
            await call()
            done += 1

    began = time.perf_counter()
    await asyncio.gather(*(caller() for _ in range(callers)))
    return done / (time.perf_counter() - began)


async def http_rate(
    port: int, callers: int, seconds: float, path: str, fixed: dict
) -> float:
    connections = [HttpConnection(port) for _ in range(callers)]
    free = list(connections)

    async def call() -> None:
        connection = free.pop()
        try:
            await connection.get(path, {**fixed, "X-Tenant": tenant()})
        finally:
            free.append(connection)

    try:
        return await closed_loop(call, callers, seconds)
    finally:
        for connection in connections:
            connection.close()


# -- part 1: the decision service against the client in process ----------------


def rls_request() -> rls_pb2.RateLimitRequest:
    """What Envoy asks for a search by a random tenant (``envoy.yaml``'s descriptors)."""
    entry = ratelimit_pb2.RateLimitDescriptor.Entry
    entries = [
        entry(key="method", value="GET"),
        entry(key="path", value="/v1/search"),
        entry(key="remote_address", value="10.0.0.1"),
        entry(key="tenant", value=tenant()),
    ]
    descriptors = [ratelimit_pb2.RateLimitDescriptor(entries=entries)]
    return rls_pb2.RateLimitRequest(domain="sluice", descriptors=descriptors)


async def service_part(
    service, redis_url: str, bundle: Bundle, seconds: float, repeats: int
):
    limiter = AsyncLimiter(connect_async(redis_url, timeout=1.0), bundle)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{service.grpc_port}")
    stub = rls_pb2_grpc.RateLimitServiceStub(channel)

    async def in_process() -> object:
        return await limiter.decide(
            method="GET", path="/v1/search", tenant=tenant(), ip="10.0.0.1"
        )

    async def over_grpc() -> object:
        return await stub.ShouldRateLimit(rls_request())

    ask = {"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/v1/search"}
    results: dict[tuple[str, int], list[float]] = {}
    for callers in CALLERS:
        for _ in range(repeats):  # A B C interleaved
            for name, run in (
                ("in process", lambda n=callers: closed_loop(in_process, n, seconds)),
                ("gRPC", lambda n=callers: closed_loop(over_grpc, n, seconds)),
                (
                    "HTTP",
                    lambda n=callers: http_rate(
                        service.http_port, n, seconds, "/v1/decide", ask
                    ),
                ),
            ):
                results.setdefault((name, callers), []).append(await run())
    await channel.close()
    await limiter.aclose()
    print("### Decision service: decisions per second (median [min .. max])\n")
    print(
        "| callers | in process (AsyncLimiter) | gRPC (RLS) | ratio | HTTP (forward-auth) | ratio |"
    )
    print("|---|---|---|---|---|---|")
    for callers in CALLERS:
        base = sorted(results[("in process", callers)])[
            len(results[("in process", callers)]) // 2
        ]
        cells = [spread(results[("in process", callers)], 0)]
        for name in ("gRPC", "HTTP"):
            mid = sorted(results[(name, callers)])[len(results[(name, callers)]) // 2]
            cells += [spread(results[(name, callers)], 0), f"{mid / base:.2f}"]
        print(f"| {callers} | " + " | ".join(cells) + " |")
    print()


# -- part 2: Envoy with and without the filter ---------------------------------


def upstream_envoy(workdir: Path) -> servers.Process:
    """An Envoy that answers 200 itself: an upstream that costs next to nothing."""
    port = free_port()
    config = {
        "admin": {
            "address": {
                "socket_address": {"address": "127.0.0.1", "port_value": free_port()}
            }
        },
        "static_resources": {
            "listeners": [
                {
                    "name": "upstream",
                    "address": {
                        "socket_address": {"address": "127.0.0.1", "port_value": port}
                    },
                    "filter_chains": [
                        {
                            "filters": [
                                {
                                    "name": "envoy.filters.network.http_connection_manager",
                                    "typed_config": {
                                        "@type": "type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager",
                                        "stat_prefix": "upstream",
                                        "route_config": {
                                            "virtual_hosts": [
                                                {
                                                    "name": "all",
                                                    "domains": ["*"],
                                                    "routes": [
                                                        {
                                                            "match": {"prefix": "/"},
                                                            "direct_response": {
                                                                "status": 200,
                                                                "body": {
                                                                    "inline_string": "ok"
                                                                },
                                                            },
                                                        }
                                                    ],
                                                }
                                            ]
                                        },
                                        "http_filters": [
                                            {
                                                "name": "envoy.filters.http.router",
                                                "typed_config": {
                                                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"
                                                },
                                            }
                                        ],
                                    },
                                }
                            ]
                        }
                    ],
                }
            ]
        },
    }
    path = workdir / "upstream.yaml"
    path.write_text(yaml.safe_dump(config))
    command = [
        servers.binary("envoy"),
        "-c",
        str(path),
        "--log-level",
        "error",
        "--disable-hot-restart",
        "--concurrency",
        "1",
    ]
    return servers.Process(command, port)


def without_filter(config: Path, port: int) -> Path:
    """The same Envoy configuration on ``port``, with its rate-limit filters taken out."""
    loaded = yaml.safe_load(config.read_text())
    loaded["admin"]["address"]["socket_address"]["port_value"] = free_port()
    listener = loaded["static_resources"]["listeners"][0]
    listener["address"]["socket_address"]["port_value"] = port
    manager = listener["filter_chains"][0]["filters"][0]
    chain = manager["typed_config"]["http_filters"]
    manager["typed_config"]["http_filters"] = [
        f for f in chain if "ratelimit" not in f["name"]
    ]
    bare = config.with_name("bare-" + config.name)
    bare.write_text(yaml.safe_dump(loaded))
    return bare


async def paced_latencies(
    port: int, rate: float, seconds: float, connections: int = 32
) -> list[float]:
    """Latencies (ms) at a fixed ``rate``: each request timed from when it was due."""
    pool = [HttpConnection(port) for _ in range(connections)]
    latencies: list[float] = []
    interval = connections / rate
    began = time.perf_counter() + 0.05

    async def sender(index: int, connection: HttpConnection) -> None:
        due = began + index * interval / connections
        while due < began + seconds:
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await connection.get("/v1/search", {"X-Tenant": tenant()})
            latencies.append((time.perf_counter() - due) * 1000)
            due += interval

    await asyncio.gather(*(sender(i, c) for i, c in enumerate(pool)))
    for connection in pool:
        connection.close()
    return sorted(latencies)


async def envoy_part(
    filtered_port: int, bare_port: int, seconds: float, repeats: int
) -> None:
    capacity: dict[str, list[float]] = {"filter": [], "none": []}
    for _ in range(repeats):
        for name, port in (("filter", filtered_port), ("none", bare_port)):
            capacity[name].append(await http_rate(port, 64, seconds, "/v1/search", {}))
    rate = 0.5 * sorted(capacity["filter"])[len(capacity["filter"]) // 2]
    lat: dict[str, list[tuple[float, float]]] = {"filter": [], "none": []}
    for _ in range(repeats):
        for name, port in (("filter", filtered_port), ("none", bare_port)):
            ordered = await paced_latencies(port, rate, seconds)
            lat[name].append((percentile(ordered, 0.5), percentile(ordered, 0.99)))
    print("### Envoy end to end, with and without Sluice's rate-limit filter\n")
    print(
        f"| Envoy | requests/s at 64 connections | p50 ms | p99 ms (at {rate:.0f} req/s) |"
    )
    print("|---|---|---|---|")
    for name in ("none", "filter"):
        print(
            f"| {'no filter' if name == 'none' else 'rate-limit filter'} | {spread(capacity[name], 0)} | "
            f"{spread([p for p, _ in lat[name]], 2)} | {spread([q for _, q in lat[name]], 2)} |"
        )
    added50 = [f[0] - n[0] for f, n in zip(lat["filter"], lat["none"], strict=True)]
    added99 = [f[1] - n[1] for f, n in zip(lat["filter"], lat["none"], strict=True)]
    ratio = (
        sorted(capacity["filter"])[repeats // 2]
        / sorted(capacity["none"])[repeats // 2]
    )
    print(
        f"\nAdded by the filter at {rate:.0f} req/s (50 % of its capacity): p50 {spread(added50, 2)} ms, "
        f"p99 {spread(added99, 2)} ms (target: p99 under 1 ms); capacity with the filter "
        f"{ratio:.2f} x without.\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    print(f"## Decision service and Envoy (bench/gateways.py)\n\n{machine_line()}.\n")
    workdir = Path(tempfile.mkdtemp(prefix="sluice-bench-gw-"))
    redis = RedisServer().start()
    rules_server = ProtocolServer().start()
    bundle = Bundle(load_rules(TENANTS))
    rules_server.serve(bundle)
    service = servers.DecisionService(
        rules_server.url.removesuffix("/api/v1/snapshot"),
        rules_server.token,
        redis.url,
        workdir,
        gateway_id="bench-decide",
        poll_interval=5.0,
        redis_timeout=1.0,
    ).start()
    started = [service]
    try:
        service.wait_version(1)
        asyncio.run(
            service_part(service, redis.url, bundle, options.seconds, options.repeats)
        )
        upstream = upstream_envoy(workdir).start()
        started.append(upstream)
        filtered = servers.envoy(
            workdir, port=free_port(), backend=upstream.port, grpc=service.grpc_port
        )
        bare_port = free_port()
        bare_config = without_filter(Path(filtered.command[2]), bare_port)
        command = [
            servers.binary("envoy"),
            "-c",
            str(bare_config),
            "--log-level",
            "warning",
        ]
        command += ["--disable-hot-restart", "--concurrency", "1"]
        bare = servers.Process(command, bare_port)
        started += [filtered.start(), bare.start()]
        asyncio.run(
            envoy_part(filtered.port, bare.port, options.seconds, options.repeats)
        )
    finally:
        for process in reversed(started):
            process.stop()
        rules_server.stop()
        redis.cleanup()


if __name__ == "__main__":
    main()
