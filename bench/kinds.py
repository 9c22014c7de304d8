"""Each limit kind against GCRA in one run: decision time, and Redis memory per active key.

Starts its own redis-server on a free loopback port. Two rule sets hold one
limit per tenant on one route, admitting everything the bench sends: GCRA
(``100 / h``, a billion deep: a charged key lives 36 s), a sliding
window (``1,000,000,000 / h``) and a calendar quota (a billion per billing month).
For each, in A B C A B C blocks interleaved in one process:

- ``decide``: ``Limiter.decide`` for a random tenant among 10,000 (the round
  trip included: what a gateway pays);
- ``evalsha``: a bare redis-py ``evalsha`` of the token-bucket script with that
  kind's keys and arguments (the script's own cost on Redis, and the round trip).

Then memory: a flushed Redis, one decision for each of 10,000 tenants, and
``INFO memory``'s ``used_memory`` growth divided by the keys written, per kind;
``MEMORY USAGE`` of one key too, and Redis's own CPU time per EVALSHA over
those decisions (``INFO commandstats``: the script's cost without the round trip).

Then calendars, without Redis: ``period_bounds`` per call, and an engine of
100,000 tenants in a few hundred distinct calendars (zones x billing days): the
plans it compiles (one per calendar), the first ``prepare`` of every tenant (a
plan compiled or found), then the steady state (every tenant again), against
the same engine with GCRA; and the cost of every calendar's period ending at
once. Prints figures; never asserts anything.
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
from sluice.calendar import Calendar, period_bounds
from sluice.engine import Engine
from sluice.model import CalendarQuota, SlidingWindow
from sluice.quota import RateLimit

TENANTS = 10_000
HUGE = 1_000_000_000
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def snapshot(
    limit: RateLimit,
    tenants: int = TENANTS,
    calendars: dict[str, Calendar] | None = None,
    zones: dict[str, str] | None = None,
) -> Snapshot:
    """One route, ``limit`` per tenant on it, tenants t0 .. t<tenants - 1> of one tier."""
    rules = Rules(
        tiers={"free": "Free"},
        tenants={f"t{i}": "free" for i in range(tenants)},
        routes={"search": Route("search", ("GET",), "/v1/search")},
        policies=(Policy("default", "search", (limit,)),),
        calendars=calendars or {},
        zones=zones or {},
    )
    return Snapshot.build(
        version=1, parent=None, published_at=_EPOCH, effective_at=_EPOCH, rules=rules
    )


def kinds() -> dict[str, Snapshot]:
    return {
        # 100 / h, burst as deep as the window: a charged key lives 36 s (memory)
        "gcra": snapshot(Limit(Dimension.TENANT, 100, 3600, HUGE)),
        "sliding_window": snapshot(SlidingWindow(Dimension.TENANT, HUGE, 3600)),
        "calendar_quota": snapshot(
            CalendarQuota(Dimension.TENANT, HUGE, "month", cycle="billing")
        ),
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
    for kind in ("sliding_window", "calendar_quota"):
        for what in ("decide", "evalsha"):
            ratios = [
                s / g
                for s, g in zip(
                    times[f"{kind} {what}"], times[f"gcra {what}"], strict=True
                )
            ]
            print(
                f"{kind} / gcra, {what}: median {statistics.median(ratios):.3f} "
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
    for name, values in cpu.items():
        print(
            f"{name:16} Redis CPU per EVALSHA: median {statistics.median(values):.2f} µs "
            f"[{min(values):.2f} .. {max(values):.2f}]"
        )
    for kind in ("sliding_window", "calendar_quota"):
        ratios = [s / g for s, g in zip(cpu[kind], cpu["gcra"], strict=True)]
        print(
            f"{kind} / gcra, Redis CPU: median {statistics.median(ratios):.3f} "
            f"[{min(ratios):.3f} .. {max(ratios):.3f}] over {repeats} pairs"
        )


ZONES = (
    "Europe/Paris", "Europe/London", "America/New_York", "America/Los_Angeles",
    "America/Sao_Paulo", "America/Santiago", "America/Havana", "Asia/Tokyo",
    "Asia/Kolkata", "Asia/Beirut", "Australia/Sydney", "Pacific/Auckland",
)  # fmt: skip


def _rule(zone: str) -> str:
    """A zone's POSIX TZ rule, the last line of its TZif file (as snapshots carry it)."""
    data = Path("/usr/share/zoneinfo", zone).read_bytes()
    return data.rstrip(b"\n").rsplit(b"\n", 1)[-1].decode()


def calendars(tenants: int, repeats: int) -> None:
    """period_bounds per call, and plans for ``tenants`` in 12 zones x 31 billing days."""
    zones = {zone: _rule(zone) for zone in ZONES}
    rng = random.Random(26)
    instants = [rng.randrange(1_767_225_600, 1_893_456_000) for _ in range(10_000)]
    for per, cycle in (
        ("day", "calendar"),
        ("month", "calendar"),
        ("month", "billing"),
    ):
        rules = [zones[rng.choice(ZONES)] for _ in instants]
        runs = []
        for _ in range(repeats):
            started = time.perf_counter()
            for instant, rule in zip(instants, rules, strict=True):
                period_bounds(instant, per, cycle, rule, 17)
            runs.append((time.perf_counter() - started) / len(instants) * 1e6)
        print(
            f"period_bounds per {per} ({cycle}): median {statistics.median(runs):.1f} µs "
            f"[{min(runs):.1f} .. {max(runs):.1f}] per call"
        )
    chosen = {
        f"t{i}": Calendar(ZONES[i % len(ZONES)], i % 31 + 1) for i in range(tenants)
    }
    quota = CalendarQuota(Dimension.TENANT, HUGE, "month", cycle="billing")
    snaps = {
        "gcra": snapshot(Limit(Dimension.TENANT, 100, 3600, HUGE), tenants),
        "calendar_quota": snapshot(quota, tenants, chosen, zones),
    }
    now = time.time()
    names = [f"t{i}" for i in range(tenants)]
    for kind, snap in snaps.items():
        firsts, steadies, plans = [], [], 0
        for _ in range(repeats):
            engine = Engine(snap)
            firsts.append(_prepare_all(engine, names, now))
            steadies.append(_prepare_all(engine, names, now))
            plans = len(engine._plans)
        print(
            f"{kind:16} {tenants} tenants, {plans} plans: first prepare "
            f"{statistics.median(firsts):.2f} µs, then {statistics.median(steadies):.2f} µs "
            f"per tenant (median of {repeats})"
        )
    engine = Engine(snaps["calendar_quota"])
    _prepare_all(engine, names, now)
    later = max(p.valid_until for p in engine._plans.values()) + 1  # every period over
    started = time.perf_counter()
    _prepare_all(engine, names, later)
    print(
        f"every calendar's period over at once: {time.perf_counter() - started:.3f} s "
        f"for {tenants} tenants ({len(engine._plans)} plans compiled again)"
    )


def _prepare_all(engine: Engine, names: list[str], now: float) -> float:
    """µs per ``engine.prepare`` of each tenant in ``names``, at ``now``."""
    started = time.perf_counter()
    for name in names:
        engine.prepare(
            now=now, route="search", method=None, path=None, tenant=name,
            user=None, api_key=None, ip=None,
        )  # fmt: skip
    return (time.perf_counter() - started) / len(names) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=3000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--redis-cpu", type=int, default=None)
    parser.add_argument("--tenants", type=int, default=100_000)
    options = parser.parse_args()
    calendars(options.tenants, options.repeats)
    process, port, workdir = start_redis(options.redis_cpu)
    url = f"redis://127.0.0.1:{port}/0"
    try:
        speed(url, options.ops, options.repeats)
        memory(url, options.repeats)
    finally:
        stop_redis(process, workdir)


if __name__ == "__main__":
    main()
