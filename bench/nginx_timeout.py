"""The nginx module's Redis timeout: how many decisions a healthy Redis leaves to the
failure modes at each timeout, on the machine as it is and beside CPU hogs (issue 24).

nginx with the module (``docs/gateways/nginx-module.conf``), one per timeout
compared, on one private Redis with rules of 1,000 tenants admitting
everything; each is sent 25 %, 50 % and 90 % of the first one's capacity by
``wrk`` (random tenants, :func:`bench.gateway_load.paced`), then its decisions
are read back from the decision stream by outcome: every one that is not
``allowed`` was decided by the route's failure mode because Redis answered
later than the timeout (a healthy Redis, so nothing else). ``--hogs``: CPU hogs
per core (stress-ng, as ``.ci/loaded`` runs the suite) during a second round.
Prints, asserts nothing::

    .venv/bin/python -m bench.nginx_timeout [--timeouts 5,50] [--seconds 5] [--hogs 2]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from collections import Counter
from pathlib import Path

import redis

from bench.common import machine_line
from bench.gateway_load import paced
from bench.gateways import TENANTS, upstream_envoy
from bench.load import load_rules
from bench.nginx_module import wrk_rate
from bench.redis_timeout import hogs
from sluice import STREAM_KEY, Bundle
from tests.client.protocol_server import ProtocolServer
from tests.gateways import servers
from tests.servers import RedisServer, free_port

SHARES = (0.25, 0.5, 0.9)


def outcomes(client: redis.Redis, gateway_id: str) -> Counter[str]:
    """The decisions of ``gateway_id`` in the stream, by outcome."""
    counted: Counter[str] = Counter()
    for _, fields in client.xrange(STREAM_KEY):
        if fields[b"gw"].decode() == gateway_id:
            for record in json.loads(fields[b"events"]):
                counted[record[5]] += record[-1]
    return counted


def round_of(
    label: str,
    gateways: dict[int, servers.Process],
    capacity: float,
    seconds: float,
    client: redis.Redis,
) -> None:
    print(f"### {label}\n")
    print("| rate | timeout | requests/s | p99 ms | decisions | by a failure mode |")
    print("|---|---|---|---|---|---|")
    for share in SHARES:
        for timeout, process in gateways.items():
            client.delete(STREAM_KEY)
            run = paced(process.port, capacity * share, seconds)
            time.sleep(1.5)  # the worker's events flushed (each second)
            counted = outcomes(client, f"bench-timeout-{timeout}")
            total = sum(counted.values())
            degraded = total - counted["allowed"]
            print(
                f"| {share:.0%} of {capacity:.0f}/s | {timeout} ms | {run.per_s:.0f} | "
                f"{run.p99:.2f} | {total} | {degraded} ({100 * degraded / max(1, total):.2f} %) |"
            )
    print()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timeouts", default="5,50", help="ms, comma-separated")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--hogs", type=int, default=2, help="CPU hogs per core")
    options = parser.parse_args()
    print(
        f"## The nginx module's Redis timeout (bench/nginx_timeout.py)\n\n{machine_line()}.\n"
    )
    workdir = Path(tempfile.mkdtemp(prefix="sluice-bench-nginx-timeout-"))
    store = RedisServer().start()
    rules = ProtocolServer().start()
    rules.serve(Bundle(load_rules(TENANTS)))
    control_plane = int(rules.url.split(":")[2].split("/")[0])
    started: list = []
    try:
        upstream = upstream_envoy(workdir).start()
        started.append(upstream)
        gateways = {}
        for timeout in map(int, options.timeouts.split(",")):
            gateways[timeout] = servers.nginx_module(
                workdir,
                port=free_port(),
                backend=upstream.port,
                control_plane=control_plane,
                redis=store.port,
                token=rules.token,
                gateway_id=f"bench-timeout-{timeout}",
                poll_interval=5.0,
                redis_timeout_ms=timeout,
            )
            started.append(gateways[timeout].start())
        time.sleep(2)  # the first poll
        capacity = wrk_rate(next(iter(gateways.values())).port, 3, workdir)
        time.sleep(1.5)  # that run's events flushed before the first count
        client = redis.Redis(port=store.port)
        round_of("The machine as it is", gateways, capacity, options.seconds, client)
        if options.hogs:
            with hogs(options.hogs) as count:
                label = f"Beside {count} CPU hogs (at the same rates)"
                round_of(label, gateways, capacity, options.seconds, client)
        print(f"After the run: {machine_line()}.")
    finally:
        for process in reversed(started):
            process.stop()
        rules.stop()
        store.cleanup()


if __name__ == "__main__":
    main()
