"""What each gateway pays to ask Sluice, against the same gateway without a limit and with
its own local limiter, and the decision service against a trivial server of its stack (issue 23).

Part 1, the decision service alone, at 64 callers in closed loops: ``sluice-decide``
with 1 worker and with 2 (when it accepts ``--workers``) against a trivial
server of the same stack (``bench/trivial.py``): gRPC (``grpc.aio`` answering OK
to ``ShouldRateLimit``, driven by a ``grpc.aio`` client over 8 connections) and
HTTP (uvicorn answering 200, driven by ``wrk``): calls per second and CPU
microseconds per call of the server's processes.

Part 2, the gateways of ``docs/gateways/`` (Envoy through RLS and through
ext_authz, nginx, HAProxy, Traefik) in front of an upstream Envoy answering 200
itself (``bench/gateway_variants.py``): requests per second at 64 keep-alive
connections and per core (requests per CPU second of the gateway, the decision
service and Redis), then the p50 / p99 latency at fixed rates of 50 % and 90 %
of each Sluice variant's capacity, for it and its baselines at the same rate.
The set rates are sent by ``wrk`` too (:func:`bench.gateway_load.paced`: 32
connections, exponential gaps; the Python pacer when wrk is missing); each
rate is sent for a second first, not counted (connections, the first decisions).

Every answer counted is Sluice's own decision: the service has a 1 s Redis
timeout and the gateways give it seconds (``tests.gateways.servers.GENEROUS``),
so neither fails open under the load (Envoy's ``failure_mode_allowed`` count
is printed to show it); rules of 1,000 tenants admit everything sent.

Everything shares the machine's cores: the load generators (``wrk`` when it is
installed, else the asyncio client of ``bench/gateways.py``), the gateways, the
service and Redis. Repeats are interleaved; figures are median [min .. max];
ratios are against baselines of the same run. Prints, never asserts on time::

    .venv/bin/python -m bench.gateway_speed [--seconds 3] [--repeats 3] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
from collections import defaultdict
from pathlib import Path

from bench import gateway_variants as gv
from bench.common import machine_line, median, spread, table
from bench.gateway_load import (
    CONNECTIONS,
    SEARCH,
    WRK,
    Run,
    envoy_failed_open,
    grpc_rate,
    measured,
    paced,
    saturate,
)
from bench.gateways import TENANTS, upstream_envoy
from bench.load import load_rules
from sluice import Bundle
from tests.client.protocol_server import ProtocolServer
from tests.gateways import servers
from tests.servers import RedisServer

#: Seconds sent at a set rate, and not counted, before its latency is measured.
WARM_UP = 1.0
#: What nginx and Traefik send the decision service for a search (forward-auth).
ASK = {"X-Forwarded-Method": "GET", "X-Forwarded-Uri": SEARCH}


# -- part 1: the decision service against a trivial server of its stack ---------


def service_part(
    measured_: dict[str, tuple[list[int], int, int]], seconds: float, repeats: int
) -> None:
    """``measured_``: name -> (pids, gRPC port, HTTP port); the first is the trivial one."""
    runs: dict[tuple[str, str], list[Run]] = defaultdict(list)
    for _ in range(repeats):
        for name, (pids, grpc_port, http_port) in measured_.items():
            runs[("gRPC", name)].append(
                measured(
                    pids, lambda p=grpc_port: (asyncio.run(grpc_rate(p, seconds)), 0)
                )
            )
            runs[("HTTP", name)].append(
                measured(
                    pids, lambda p=http_port: saturate(p, seconds, "/v1/decide", ASK)
                )
            )
    trivial, one, *_ = measured_
    rows = []
    for protocol in ("gRPC", "HTTP"):
        floor = median(r.per_s for r in runs[(protocol, trivial)])
        single = median(r.per_s for r in runs[(protocol, one)])
        for name in measured_:
            got = runs[(protocol, name)]
            mid = median(r.per_s for r in got)
            rows.append(
                [
                    protocol,
                    name,
                    spread((r.per_s for r in got), 0),
                    spread((r.cpu_us for r in got), 0),
                    "" if name == trivial else f"{mid / floor:.2f}",
                    "" if name in (trivial, one) else f"{mid / single:.2f}",
                ]
            )
    print(f"### The decision service alone: {CONNECTIONS} callers, closed loops\n")
    header = ["protocol", "server", "calls/s", "server CPU µs per call"]
    print(table([*header, "x trivial server", "x 1 worker"], rows) + "\n")


# -- part 2: the gateways ---------------------------------------------------------


def capacity_part(
    gateways: list[gv.Gateway], seconds: float, repeats: int
) -> dict[int, float]:
    """Requests/s at saturation and per core of every variant, against its no-limit
    one; returns each variant's median requests/s (by its index)."""
    runs: dict[int, list[Run]] = defaultdict(list)
    for _ in range(repeats):
        for index, gateway in enumerate(gateways):
            load = lambda g=gateway: saturate(g.port, seconds)  # noqa: E731
            runs[index].append(measured(gateway.pids, load))
    bare = {
        g.family: median(r.per_s for r in runs[i])
        for i, g in enumerate(gateways)
        if g.variant == gv.NONE
    }
    rows = []
    for index, gateway in enumerate(gateways):
        got = runs[index]
        rows.append(
            [
                gateway.name,
                gateway.variant,
                spread((r.per_s for r in got), 0),
                spread((r.per_core for r in got), 0),
                f"{median(r.per_s for r in got) / bare[gateway.family]:.2f}",
                sum(r.refused for r in got),
            ]
        )
    print(f"### Gateways at saturation: {CONNECTIONS} keep-alive connections\n")
    print(
        "Per core: requests per CPU second of the gateway, and with Sluice of the "
        "decision service and Redis too (not the load generator, not the upstream).\n"
    )
    header = ["gateway", "variant", "requests/s", "per core", "x no limit"]
    print(table([*header, "non-2xx + socket errors"], rows) + "\n")
    return {i: median(r.per_s for r in got) for i, got in runs.items()}


def latency_part(
    gateways: list[gv.Gateway],
    capacity: dict[int, float],
    seconds: float,
    repeats: int,
) -> None:
    """p50 / p99 at 50 % and 90 % of each Sluice variant's ``capacity``, with its baselines."""
    rows = []
    for index, sluice in enumerate(gateways):
        if sluice.variant != gv.SLUICE:
            continue
        full = capacity[index]
        group = [sluice] + [
            g for g in gateways if g.family == sluice.family and g.variant != gv.SLUICE
        ]
        for share in (0.5, 0.9):
            for gateway in group:  # warm up: connections, the first decisions
                paced(gateway.port, share * full, WARM_UP)
            got: dict[str, list[tuple[float, float]]] = defaultdict(list)
            for _ in range(repeats):
                for gateway in group:
                    run = paced(gateway.port, share * full, seconds)
                    got[gateway.variant].append((run.p50, run.p99))
            added = [
                s[1] - n[1] for s, n in zip(got[gv.SLUICE], got[gv.NONE], strict=True)
            ]
            cells = [
                _p50_p99(got[v]) if v in got else "—"
                for v in (gv.NONE, gv.LOCAL, gv.SLUICE)
            ]
            rate = f"{share:.0%} of {full:.0f}/s"
            rows.append([sluice.name, rate, *cells, spread(added, 2)])
    print(
        "### Latency at set rates: ms, p50 / p99 (wrk, 32 connections, exponential "
        "gaps, each request timed from its send: bench/gateway_load.py)\n"
    )
    header = ["gateway", "rate", "no limit", "local limiter", "Sluice"]
    print(table([*header, "p99 added by Sluice"], rows) + "\n")


def _p50_p99(pairs: list[tuple[float, float]]) -> str:
    return f"{spread((p for p, _ in pairs), 2)} / {spread((q for _, q in pairs), 2)}"


def failed_open(gateways: list[gv.Gateway]) -> None:
    """What each Envoy served on its own after a failed call to Sluice (none expected:
    the bench gives the service seconds, as the tests do)."""
    counts = [
        f"{g.name} {envoy_failed_open(Path(g.process.command[2]))}"
        for g in gateways
        if g.family == "Envoy" and g.variant == gv.SLUICE
    ]
    print(
        f"Served by Envoy's failure_mode_allow over the whole run: {', '.join(counts)}.\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument(
        "--quick", action="store_true", help="1 s runs, 1 repeat: a smoke run"
    )
    options = parser.parse_args()
    seconds, repeats = (1.0, 1) if options.quick else (options.seconds, options.repeats)
    workers = gv.accepts_workers()
    print(f"## Gateway speed (bench/gateway_speed.py)\n\n{machine_line()}.")
    print(
        f"Load generator: {WRK or 'the asyncio client of bench/gateways.py (no wrk)'}; "
        f"{seconds:g} s per run, {repeats} repeat(s); sluice-decide "
        f"{'accepts' if workers else 'has no'} --workers.\n"
    )
    rules = ProtocolServer().start()
    rules.serve(Bundle(load_rules(TENANTS)))
    stack = gv.Stack(
        Path(tempfile.mkdtemp(prefix="sluice-bench-speed-")),
        RedisServer().start(),
        rules,
        [],
    )
    try:
        compared = {"trivial server": gv.trivial(stack)}
        one = stack.service(*(("--workers", "1") if workers else ()))
        compared["sluice-decide, 1 worker"] = _ports(one)
        behind = one
        if workers:
            behind = stack.service("--workers", "2")
            compared["sluice-decide, 2 workers"] = _ports(behind)
        service_part(compared, seconds, repeats)
        upstream = stack.process(upstream_envoy(stack.workdir))
        gateways = gv.start_gateways(stack, behind, upstream.port)
        capacity = capacity_part(gateways, seconds, repeats)
        latency_part(gateways, capacity, seconds, repeats)
        failed_open(gateways)
        print(f"After the run: {machine_line()}.")
    finally:
        stack.stop()


def _ports(service: servers.DecisionService) -> tuple[list[int], int, int]:
    assert service.process is not None
    assert service.process.process is not None
    return [service.process.process.pid], service.grpc_port, service.http_port


if __name__ == "__main__":
    main()
