"""Load and what it costs, for the gateway benches: ``wrk`` at saturation and at a
set rate, ``grpc.aio`` closed loops, and the CPU seconds of process trees (``/proc``).

``wrk`` (Debian, ``.ci/apt-packages``) is the HTTP load generator when it is
installed: C, one thread, a random tenant per request from a Lua script; else
the asyncio client of ``bench/gateways.py`` does the same, at a higher CPU cost
on the machine's shared cores.

Latency at a set rate (:func:`paced`): ``wrk`` again, its requests due at the
arrivals of a Poisson process at the rate (one schedule for the thread, each
request sent by the first of 32 connections free at its time), reporting its
own percentiles. A request is timed from its send: when all 32 connections are
busy at a request's time, the wait until one is free is not in its latency (at
50 % of capacity this is rare; the rate reached is printed). The Python pacer (``bench/gateways.py:paced_latencies``, the fallback
without wrk) times from when each request was due, but costs these two cores
so much that its tail was its own: nginx answering 204 itself measured p99
0.35-0.5 ms with wrk and 2-10 ms with the Python pacer at the same rate.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
import urllib.parse
import urllib.request
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import grpc
import yaml
from envoy.service.ratelimit.v3 import rls_pb2_grpc

from bench.common import percentile
from bench.gateways import (
    TENANTS,
    closed_loop,
    http_rate,
    paced_latencies,
    rls_request,
)

CONNECTIONS = 64
GRPC_CHANNELS = 8  #: so that the workers of one service share the connections
WRK = shutil.which("wrk")
SEARCH = "/v1/search"
ASK = {"X-Forwarded-Method": "GET", "X-Forwarded-Uri": SEARCH}


def cpu_seconds(roots: Iterable[int]) -> float:
    """CPU seconds (user + system) spent so far by ``roots`` and all their descendants."""
    found: dict[int, tuple[int, int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            found[int(entry.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (parent, _) in found.items():
        children[parent].append(pid)
    ticks, todo, seen = 0, list(roots), set()
    while todo:
        pid = todo.pop()
        if pid in found and pid not in seen:
            seen.add(pid)
            ticks += found[pid][1]
            todo += children[pid]
    return ticks / os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Run:
    """One closed-loop run: calls per second, and cores the measured processes kept busy."""

    per_s: float
    cores: float
    refused: int = 0  #: answers that were not 2xx (wrk only)

    @property
    def per_core(self) -> float:
        return self.per_s / self.cores if self.cores else float("nan")

    @property
    def cpu_us(self) -> float:
        return 1e6 * self.cores / self.per_s if self.per_s else float("nan")


def measured(pids: list[int], load: Callable[[], tuple[float, int]]) -> Run:
    """Run ``load`` (calls/s, refused) while counting the CPU of ``pids``."""
    cpu, began = cpu_seconds(pids), time.perf_counter()
    per_s, refused = load()
    elapsed = time.perf_counter() - began
    return Run(per_s, (cpu_seconds(pids) - cpu) / elapsed, refused)


WRK_SCRIPT = """
local headers = {%s}
request = function()
  headers["X-Tenant"] = "t" .. math.random(0, %d)
  return wrk.format("GET", "%s", headers)
end
"""


def run_wrk(port: int, script: str, connections: int, seconds: float) -> str:
    """What ``wrk`` (one thread, ``connections``) printed running the Lua ``script``
    against ``port`` for ``seconds`` (whole seconds, at least one)."""
    assert WRK is not None
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as file:
        file.write(script)
    command = [WRK, "-t1", f"-c{connections}", f"-d{max(1, round(seconds))}s"]
    command += ["--timeout", "10s", "-s", file.name, f"http://127.0.0.1:{port}"]
    try:
        return subprocess.run(
            command, capture_output=True, text=True, timeout=120
        ).stdout
    finally:
        os.unlink(file.name)


def saturate(
    port: int, seconds: float, path: str = SEARCH, fixed=None
) -> tuple[float, int]:
    """Requests/s (and non-2xx answers) at CONNECTIONS keep-alive connections, random tenants."""
    fixed = fixed or {}
    if WRK is None:
        return asyncio.run(http_rate(port, CONNECTIONS, seconds, path, fixed)), 0
    pairs = ", ".join(f'["{k}"] = "{v}"' for k, v in fixed.items())
    out = run_wrk(port, WRK_SCRIPT % (pairs, TENANTS - 1, path), CONNECTIONS, seconds)
    rate = re.search(r"Requests/sec:\s+([\d.]+)", out)
    if rate is None:
        raise RuntimeError(f"wrk said:\n{out}")
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(
        r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out
    )
    return float(rate.group(1)), (int(bad.group(1)) if bad else 0) + (
        sum(map(int, errors.groups())) if errors else 0
    )


async def grpc_rate(port: int, seconds: float) -> float:
    options = [("grpc.use_local_subchannel_pool", 1)]
    channels = [
        grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=options)
        for _ in range(GRPC_CHANNELS)
    ]
    stubs = [rls_pb2_grpc.RateLimitServiceStub(c) for c in channels]
    turn = iter(range(1 << 62))

    async def call() -> object:
        return await stubs[next(turn) % GRPC_CHANNELS].ShouldRateLimit(rls_request())

    try:
        return await closed_loop(call, CONNECTIONS, seconds)
    finally:
        for channel in channels:
            await channel.close()


PACED_SCRIPT = """
local ffi = require "ffi"
ffi.cdef[[
  typedef struct { long tv_sec; long tv_nsec; } sluice_timespec;
  int clock_gettime(int clock, sluice_timespec *now);
]]
local clock = ffi.new("sluice_timespec")
local function now_ms()
  ffi.C.clock_gettime(1, clock) -- CLOCK_MONOTONIC
  return tonumber(clock.tv_sec) * 1000 + tonumber(clock.tv_nsec) / 1e6
end
local headers = {%(fixed)s}
local gap_ms = 1000 / %(rate)f
local due = nil
request = function()
  headers["X-Tenant"] = "t" .. math.random(0, %(last)d)
  return wrk.format("GET", "%(path)s", headers)
end
-- one schedule for the thread's connections: arrivals of a Poisson process at the
-- rate, each request sent by the first connection free at its time (at once if
-- it is late: then the wait before the send is not in its latency)
delay = function()
  local now = now_ms()
  due = math.max(due or now, now - 1000) - gap_ms * math.log(1 - math.random())
  return math.max(0, due - now)
end
done = function(summary, latency, requests)
  io.write(string.format("PACED %%d %%d %%d %%d %%d\\n", summary.requests,
    summary.duration, latency:percentile(50), latency:percentile(99),
    summary.errors.status + summary.errors.connect + summary.errors.read +
    summary.errors.write + summary.errors.timeout))
end
"""


@dataclass
class Paced:
    """What a run at a set rate measured."""

    per_s: float  #: requests per second reached
    p50: float  #: ms
    p99: float  #: ms
    errors: int = 0  #: non-2xx answers and socket errors


def paced(
    port: int,
    rate: float,
    seconds: float,
    path: str = SEARCH,
    fixed: dict[str, str] | None = None,
    connections: int = 32,
) -> Paced:
    """p50 / p99 of ``connections`` sending ``rate`` requests/s in all for ``seconds``
    (random tenants; wrk, else the Python pacer)."""
    if WRK is None:
        ordered = asyncio.run(paced_latencies(port, rate, seconds, connections))
        return Paced(len(ordered) / seconds, *_p50_p99(ordered))
    pairs = ", ".join(f'["{k}"] = "{v}"' for k, v in (fixed or {}).items())
    text = PACED_SCRIPT % {
        "fixed": pairs,
        "connections": connections,
        "rate": rate,
        "last": TENANTS - 1,
        "path": path,
    }
    out = run_wrk(port, text, connections, seconds)
    found = re.search(r"^PACED (\d+) (\d+) (\d+) (\d+) (\d+)$", out, re.MULTILINE)
    if found is None:
        raise RuntimeError(f"wrk said:\n{out}")
    requests, micros, p50, p99, errors = map(int, found.groups())
    return Paced(requests / (micros / 1e6), p50 / 1000, p99 / 1000, errors)


def _p50_p99(ordered: list[float]) -> tuple[float, float]:
    return percentile(ordered, 0.5), percentile(ordered, 0.99)


def envoy_failed_open(config: Path) -> int:
    """Requests the Envoy running ``config`` served on its own because its call to
    Sluice failed (``failure_mode_allowed`` of the rate-limit and ext_authz filters)."""
    admin = yaml.safe_load(config.read_text())["admin"]["address"]["socket_address"]
    # per upstream cluster (ext_authz counts each request under http.<prefix> too)
    wanted = urllib.parse.quote(
        r"^cluster\.[^.]+\.(ratelimit|ext_authz)\.failure_mode_allowed$"
    )
    url = f"http://127.0.0.1:{admin['port_value']}/stats?format=json&filter={wanted}"
    with urllib.request.urlopen(url, timeout=10) as response:
        stats = json.loads(response.read())["stats"]
    return sum(int(s.get("value", 0)) for s in stats if "value" in s)
