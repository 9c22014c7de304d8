"""Accuracy with a stalling Redis: the demo gateway under load while Redis pauses.

``--processes`` processes of ``--threads`` threads send one tenant's search
(``--rate``/s, burst ``--burst``, a route that fails open; one thread per
process sends a tenant far from its limit instead) through the demo
gateway (gunicorn, ``--workers`` worker processes, the default 5 ms Redis
timeout) for ``--seconds``, on keep-alive connections, as fast as answers come.
Every ``--every`` seconds Redis is paused for ``--pause`` seconds
(``CLIENT PAUSE ... WRITE``: scripts wait). A reference run without pauses
comes first, same load, so latencies can be read against it.

What is printed, per run:

- admitted against the most a correct limiter may admit, ``burst + rate x
  elapsed`` (Redis clock), and the documented bound of a stall, ``gateways x
  (burst + rate x stall)`` per pause;
- answers that failed open (200 without RateLimit fields: decided without
  Redis) and 5xx (none expected: the route fails open);
- per pause, how soon Redis admitted again once it was back (the first 200
  with RateLimit fields: an answer Redis decided), and the share of answers
  decided without Redis during pauses and outside them;
- latency of the gateway's answers: its own time (``Server-Timing``, from the
  request reaching the application to the start of its answer) and what the
  clients saw (queueing for the machine's two CPUs included).

Asserts nothing.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import redis

from bench.common import machine_line, percentile, table
from sluice import Bundle
from tests.client.factories import limit, policy, rules, snapshot
from tests.servers import DemoGatewayServer, RedisServer

#: (start, seconds, status, fields, inside, probe): fields is False for an answer
#: without RateLimit fields (decided without Redis); inside is the gateway's own
#: time (its Server-Timing), seconds; probe is True for the tenant far from its limit
Answer = tuple[float, float, int, bool, float, bool]

SATURATED, FREE = "acme", "globex"  #: the tenant at its limit; one far from it


def client(port: int, threads: int, seconds: float, start: Any, out: Any) -> None:
    """One client process: ``threads`` keep-alive connections sending searches."""
    answers: list[Answer] = []
    lock = threading.Lock()

    def run(tenant: str) -> None:
        mine: list[Answer] = []
        probe = tenant == FREE
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        deadline = time.monotonic() + seconds
        while (began := time.monotonic()) < deadline:
            try:
                conn.request("GET", "/v1/search?q=x", headers={"X-Tenant": tenant})
                response = conn.getresponse()
                response.read()
                took = time.monotonic() - began
                fields = response.getheader("RateLimit-Policy") is not None
                timing = response.getheader("Server-Timing", "dur=nan")
                inside = float(timing.rpartition("dur=")[2]) / 1000
                mine.append((began, took, response.status, fields, inside, probe))
            except (OSError, http.client.HTTPException):
                failed = (
                    began,
                    time.monotonic() - began,
                    0,
                    False,
                    float("nan"),
                    probe,
                )
                mine.append(failed)
                conn.close()
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        conn.close()
        with lock:
            answers.extend(mine)

    start.wait()
    # one thread in each process sends the tenant far from its limit: all its
    # answers are Redis's unless Redis is not used, so they show recovery
    tenants = [FREE] + [SATURATED] * (threads - 1)
    pool = [threading.Thread(target=run, args=(t,)) for t in tenants]
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    out.put(answers)


def redis_seconds(client_: redis.Redis) -> float:
    seconds, micros = client_.time()
    return seconds + micros / 1_000_000


def one_run(
    options: argparse.Namespace, gateway: DemoGatewayServer, url: str, *, stalls: bool
) -> dict:
    """Load the gateway for ``options.seconds``; pause Redis if ``stalls``."""
    admin = redis.Redis.from_url(url)
    admin.flushdb()
    time.sleep(1.5)  # the gateway's reject cache forgets the last run's debts
    context = multiprocessing.get_context("fork")
    start, out = context.Event(), context.Queue()
    args = (gateway.port, options.threads, options.seconds, start, out)
    processes = [
        context.Process(target=client, args=args) for _ in range(options.processes)
    ]
    for process in processes:
        process.start()
    time.sleep(0.5)
    began, began_redis = time.monotonic(), redis_seconds(admin)
    start.set()
    pauses = []
    if stalls:
        while time.monotonic() - began + options.every < options.seconds:
            time.sleep(
                max(0.0, began + (len(pauses) + 1) * options.every - time.monotonic())
            )
            admin.execute_command("CLIENT", "PAUSE", int(options.pause * 1000), "WRITE")
            pauses.append(time.monotonic())
    answers = [a for _ in processes for a in out.get(timeout=options.seconds + 120)]
    elapsed = redis_seconds(admin) - began_redis
    for process in processes:
        process.join(timeout=30)
    return summarize(options, sorted(answers), pauses, elapsed)


def summarize(
    options: argparse.Namespace,
    answers: list[Answer],
    pauses: list[float],
    elapsed: float,
) -> dict[str, Any]:
    probes = [a for a in answers if a[5]]
    answers = [a for a in answers if not a[5]]
    admitted = sum(1 for a in answers if a[2] == 200)
    fail_open = sum(1 for a in answers if a[2] == 200 and not a[3])
    recoveries = []
    for start in pauses:  # until Redis decides again: the free tenant's answers
        back = start + options.pause
        healthy = (a[0] for a in probes if a[0] >= back and a[3])
        first = next(healthy, None)
        if first is not None:
            recoveries.append(first - back)
    windows = [(s, s + options.pause + 0.2) for s in pauses]
    during = [a for a in answers if any(lo <= a[0] <= hi for lo, hi in windows)]
    outside = [a for a in answers if not any(lo <= a[0] <= hi for lo, hi in windows)]
    times = sorted(a[1] for a in answers)
    inside = sorted(a[4] for a in answers if a[4] == a[4])  # not nan
    maximum = options.burst + options.rate * elapsed
    bound = (
        len(pauses) * options.workers * (options.burst + options.rate * options.pause)
    )
    return {
        "answers": len(answers),
        "admitted": admitted,
        "maximum": maximum,
        "bound": bound,
        "fail_open": fail_open,
        "errors_5xx": sum(1 for a in answers if a[2] >= 500),
        "failed": sum(1 for a in answers if a[2] == 0),
        "pauses": len(pauses),
        "recoveries": recoveries,
        "degraded_during": _share_degraded(during),
        "degraded_outside": _share_degraded(outside),
        "p50": percentile(times, 0.5),
        "p99": percentile(times, 0.99),
        "max": times[-1] if times else float("nan"),
        "p99_outside": percentile(sorted(a[1] for a in outside), 0.99),
        "gateway_p50": percentile(inside, 0.5),
        "gateway_p99": percentile(inside, 0.99),
        "gateway_max": inside[-1] if inside else float("nan"),
    }


def _share_degraded(answers: list[Answer]) -> float:
    """Share of answers decided without Redis (no RateLimit fields)."""
    return sum(1 for a in answers if not a[3]) / len(answers) if answers else 0.0


def _ms(values: list[float]) -> str:
    if not values:
        return "n/a"
    ordered = sorted(values)
    low, mid, high = ordered[0], percentile(ordered, 0.5), ordered[-1]
    return f"{mid * 1000:.0f} [{low * 1000:.0f} .. {high * 1000:.0f}]"


def _row(name: str, run: dict[str, Any]) -> list[str]:
    ms = 1000
    return [
        name,
        f"{run['answers']:,}",
        f"{run['admitted']:,}",
        f"{run['maximum']:,.0f}",
        f"{run['admitted'] / run['maximum']:.3f}",
        f"{run['fail_open']:,} (bound {run['bound']:,.0f})",
        f"{run['errors_5xx']} / {run['failed']}",
        f"{run['degraded_outside']:.1%} / {run['degraded_during']:.1%}",
        f"{run['gateway_p50'] * ms:.2f} / {run['gateway_p99'] * ms:.2f} / "
        f"{run['gateway_max'] * ms:.0f}",
        f"{run['p50'] * ms:.1f} / {run['p99'] * ms:.1f} / "
        f"{run['p99_outside'] * ms:.1f} / {run['max'] * ms:.0f}",
    ]


HEADER = [
    "run",
    "answers",
    "admitted",
    "burst + rate x elapsed",
    "admitted / maximum",
    "failed open (stall bound)",
    "5xx / no answer",
    "degraded: outside / during pauses",
    "gateway's own time p50 / p99 / max ms",
    "clients saw p50 / p99 / p99 outside pauses / max ms",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--processes", type=int, default=4)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--reference-seconds", type=float, default=20.0)
    parser.add_argument("--rate", type=int, default=50, help="tokens per second")
    parser.add_argument("--burst", type=int, default=100)
    parser.add_argument("--pause", type=float, default=0.3, help="seconds")
    parser.add_argument("--every", type=float, default=5.0, help="seconds")
    parser.add_argument("--workers", type=int, default=2, help="gateway processes")
    parser.add_argument("--redis-timeout", default="0.005")
    options = parser.parse_args()
    print(f"## Accuracy with a stalling Redis\n\n{machine_line()}")
    print(
        f"{options.processes} processes x {options.threads} threads through the demo "
        f"gateway (gunicorn, {options.workers} workers, Redis timeout "
        f"{float(options.redis_timeout) * 1000:g} ms) on one tenant's search "
        f"({options.rate}/s, burst {options.burst}, fails open); Redis paused "
        f"{options.pause * 1000:g} ms every {options.every:g} s for {options.seconds:g} s, "
        f"after a reference run of {options.reference_seconds:g} s without pauses.\n"
    )
    server = RedisServer().start()
    workdir = Path(tempfile.mkdtemp(prefix="sluice-stall-"))
    bundle = workdir / "bundle.json"
    rules_ = rules(
        policy("default", "search", limit("tenant", options.rate, 1, options.burst)),
        policy(f"tenant:{FREE}", "search", limit("tenant", 10**6, 1, 10**6)),
    )
    bundle.write_text(json.dumps(Bundle(snapshot(rules_)).to_json()))
    gateway = DemoGatewayServer(
        {
            "SLUICE_BUNDLE_FILE": str(bundle),
            "SLUICE_GATEWAY_ID": "bench-stall",
            "SLUICE_REDIS_URL": server.url,
            "SLUICE_REDIS_TIMEOUT": options.redis_timeout,
            "SLUICE_GATEWAY_WORKERS": str(options.workers),
        }
    ).start()
    try:
        seconds = options.seconds
        options.seconds = options.reference_seconds
        reference = one_run(options, gateway, server.url, stalls=False)
        options.seconds = seconds
        stalled = one_run(options, gateway, server.url, stalls=True)
    finally:
        gateway.stop()
        server.cleanup()
    rows = [_row("reference, no pause", reference), _row("Redis paused", stalled)]
    print(table(HEADER, rows))
    print(
        f"\n{stalled['pauses']} pauses: decided in Redis again {_ms(stalled['recoveries'])} ms "
        f"after each pause ended (median [min .. max]; the first answer to the tenant "
        f"far from its limit with RateLimit fields). Admitted beyond the maximum: "
        f"{max(0, stalled['admitted'] - stalled['maximum']):,.0f} (the stall bound "
        f"{stalled['bound']:,.0f}: {options.workers} gateways x (burst + rate x stall) x "
        f"{stalled['pauses']} pauses)."
    )


if __name__ == "__main__":
    main()
