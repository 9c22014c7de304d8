"""nginx enforcing with Sluice's Lua module, against nginx without it, with limit_req, and through forward-auth.

Five nginx, one worker each, in front of the same upstream (an Envoy that
answers 200 itself), on the same Redis:

- **no limit**: nginx proxying, nothing else;
- **limit_req**: nginx's own in-memory limiter, per tenant (generous: never rejects);
- **module**: ``docs/gateways/nginx-module.conf``: one EVALSHA of the client's
  token-bucket script per request, auto-pipelined by the worker's flusher,
  decision events on;
- **module, a connection per call**: the same with ``redis_pipelining = false``
  (a pooled connection per EVALSHA: what the module did before);
- **forward-auth**: ``docs/gateways/nginx.conf``: ``auth_request`` to the decision
  service (``sluice-decide``), which runs the same script.

Five more, answering 204 themselves instead of proxying (no upstream), to say
where a decision's cost goes: **no limit**; the **module**, auto-pipelined, with
a connection per call, and with **two workers** (``worker_processes 2``: each
its own Lua state, flusher and connection); and the **EVALSHA floor**: an
``access_by_lua`` that only runs the same script with the same keys over a
pooled lua-resty-redis connection, the least a Lua module making its own Redis
call per request costs. The module answering itself is what the target against
``redis-benchmark`` compares (decisions/s with no upstream).

For each: requests per second at 64 connections (its capacity, measured with
``wrk`` when it is installed, ``apt-get install wrk``, else with the Python
load generator of ``bench/gateways.py``, which is then the bottleneck), and the
CPU each request cost nginx's workers (and the decision service); then p50 /
p99 latency at set rates (:data:`PACED_RUNS`: 50 % and 90 % of the module's
capacity for the proxying ones, of the module answering itself for the 204
ones; forward-auth, the connection per call and the floor at shares of their
own), sent and timed by ``wrk`` (:func:`bench.gateway_load.paced`); the p99
each adds to the nginx without a limit at the same rate; and
``redis-benchmark`` running EVALSHA of the same script with the same keys and
arguments, in each repeat beside the gateways, as the ceiling a Redis-bound
gateway can reach.
Everything shares this machine's cores. Prints figures, never asserts on
time (``docs/benchmarks.md``)::

    .venv/bin/python -m bench.nginx_module [--seconds 3] [--repeats 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import redis

from bench.common import machine_line, median, spread
from bench.gateway_load import Paced, paced
from bench.gateways import TENANTS, http_rate, upstream_envoy
from bench.load import load_rules
from sluice import Bundle
from sluice.bucket import SCRIPT
from sluice.engine import Engine
from tests.client.protocol_server import ProtocolServer
from tests.gateways import servers
from tests.servers import RedisServer, free_port

#: What every nginx of the bench has in ``http``: no access log, temp paths in its prefix.
COMMON = """    access_log off;
    client_body_temp_path tmp/body;
    proxy_temp_path tmp/proxy;
    fastcgi_temp_path tmp/fastcgi;
    uwsgi_temp_path tmp/uwsgi;
    scgi_temp_path tmp/scgi;
"""

PLAIN = """daemon off;
worker_processes 1;
pid nginx.pid;
error_log stderr warn;
events {{ worker_connections 1024; }}
http {{
{common}    upstream backend {{ server 127.0.0.1:{backend}; keepalive 16; }}
    limit_req_zone $http_x_tenant zone=tenants:10m rate=100000r/s;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            {limit}
            proxy_pass http://backend;
            proxy_http_version 1.1;
            proxy_set_header Connection "";
        }}
    }}
}}
"""


def plain_nginx(workdir: Path, *, backend: int, limit: bool) -> servers.Process:
    """nginx proxying to ``backend``, with a never-rejecting limit_req when ``limit``."""
    port = free_port()
    rule = "limit_req zone=tenants burst=100000 nodelay;" if limit else ""
    return _nginx(
        workdir / f"plain-{port}",
        port,
        PLAIN.format(backend=backend, port=port, limit=rule, common=COMMON),
    )


def _nginx(prefix: Path, port: int, text: str) -> servers.Process:
    """An nginx of configuration ``text`` in its own ``prefix``, ready on ``port``."""
    (prefix / "tmp").mkdir(parents=True)
    config = prefix / "nginx.conf"
    config.write_text(text)
    command = [servers.binary("nginx"), "-p", str(prefix), "-e", "stderr"]
    return servers.Process([*command, "-c", str(config)], port)


def two_workers(process: servers.Process) -> servers.Process:
    """``process`` (an nginx of one worker) with two: each its own Lua state, flusher
    and Redis connection, as ``worker_processes auto`` gives on two cores."""
    config = Path(process.command[-1])
    config.write_text(
        config.read_text().replace("worker_processes 1;", "worker_processes 2;")
    )
    return process


def answering_itself(process: servers.Process) -> servers.Process:
    """``process`` with its upstream replaced by a 204: from Lua's content phase in an
    nginx with Lua (``return`` would answer in the rewrite phase, before the access
    phase the module decides in), else by ``return``."""
    config = Path(process.command[-1])
    text = config.read_text()
    proxied = "proxy_pass http://backend;"
    if proxied not in text:
        raise RuntimeError(f"no {proxied!r} in {config}")
    answer = (
        "content_by_lua_block { ngx.exit(204) }" if "lua" in text else "return 204;"
    )
    config.write_text(text.replace(proxied, answer))
    return process


FLOOR = """daemon off;
worker_processes 1;
pid nginx.pid;
error_log stderr warn;
load_module /usr/lib/nginx/modules/ndk_http_module.so;
load_module /usr/lib/nginx/modules/ngx_http_lua_module.so;
events {{ worker_connections 1024; }}
http {{
{common}    server {{
        listen 127.0.0.1:{port};
        location / {{
            access_by_lua_block {{
                local ok, redis = pcall(require, "resty.redis")
                if not ok then redis = require "nginx.redis" end
                local red = redis:new()
                red:set_timeout(1000)
                assert(red:connect("127.0.0.1", {redis}, {{ pool_size = 64 }}))
                local tenant = ngx.var.http_x_tenant or "t0"
                assert(red:evalsha("{sha}", {keys}))
                red:set_keepalive(60000, 64)
            }}
            content_by_lua_block {{ ngx.exit(204) }}
        }}
    }}
}}
"""


def evalsha_floor(workdir: Path, redis_port: int, bundle: Bundle) -> servers.Process:
    """nginx whose Lua only runs the token-bucket script of a search request by EVALSHA."""
    client = redis.Redis(port=redis_port)
    sha = client.script_load(SCRIPT)
    prepared = search_request(bundle, "TENANT")
    keys = [
        '"' + key.replace("TENANT", '" .. tenant .. "') + '"' for key in prepared.keys
    ]
    args = [f'"{a.decode()}"' for a in prepared.plan.args]
    port = free_port()
    call = ", ".join([str(len(keys)), *keys, *args])
    text = FLOOR.format(port=port, redis=redis_port, sha=sha, keys=call, common=COMMON)
    return _nginx(workdir / f"floor-{port}", port, text)


def search_request(bundle: Bundle, tenant: str):
    """What the engine prepares for a search request of ``tenant``: keys and arguments."""
    return Engine(bundle.active).prepare(
        route="search",
        method=None,
        path=None,
        tenant=tenant,
        user=None,
        api_key=None,
        ip="127.0.0.1",
        now=time.time(),
    )


def redis_benchmark(
    port: int, bundle: Bundle, seconds: float
) -> tuple[float, int, int]:
    """EVALSHA/s of the token-bucket script with a search request's keys and arguments,
    50 clients, random tenants, as ``redis-benchmark`` measures it (about ``seconds``
    long at this machine's usual rate); and the (calls, µs) of EVALSHA it cost Redis."""
    client = redis.Redis(port=port)
    sha = client.script_load(SCRIPT)
    prepared = search_request(bundle, "t__rand_int__")
    args = [a.decode() for a in prepared.plan.args]
    requests = max(10_000, int(25_000 * seconds))
    command = ["redis-benchmark", "-p", str(port), "-c", "50", "-r", str(TENANTS)]
    command += ["-n", str(requests), "--csv", "EVALSHA", sha, str(len(prepared.keys))]
    calls, usec = evalsha_stats(client)
    out = subprocess.run(
        [*command, *prepared.keys, *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    after_calls, after_usec = evalsha_stats(client)
    # "EVALSHA ...","123456.79",...: the second field of the last line
    rate = float(out.strip().splitlines()[-1].split('","')[1].strip('"'))
    return rate, after_calls - calls, after_usec - usec


_TICK = os.sysconf("SC_CLK_TCK")

WRK_SCRIPT = f"""
request = function()
  return wrk.format(nil, "/v1/search", {{["X-Tenant"] = "t" .. math.random(0, {TENANTS - 1})}})
end
"""


def wrk_rate(port: int, seconds: float, workdir: Path) -> float:
    """Requests/s ``wrk`` (one thread, 64 connections, random tenants) gets from ``port``."""
    script = workdir / "tenants.lua"
    script.write_text(WRK_SCRIPT)
    command = ["wrk", "-t1", "-c64", f"-d{max(1, round(seconds))}s", "-s", str(script)]
    out = subprocess.run(
        [*command, f"http://127.0.0.1:{port}/v1/search"],
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    if "Non-2xx" in out:
        raise RuntimeError(f"wrk saw errors from {port}:\n{out}")
    return float(out.split("Requests/sec:")[1].split()[0])


def cpu_seconds(pids: list[int]) -> float:
    """User and system CPU seconds the processes ``pids`` have used so far."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / _TICK


def children(pid: int) -> list[int]:
    """The worker processes of an nginx master."""
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True)
    return [int(line) for line in out.stdout.split()]


def evalsha_stats(client: redis.Redis) -> tuple[int, int]:
    """(calls, µs) of EVALSHA that Redis counted so far."""
    stats = client.info("commandstats").get("cmdstat_evalsha", {})
    return int(stats.get("calls", 0)), int(stats.get("usec", 0))


def measure(
    ports: dict[str, int],
    seconds: float,
    repeats: int,
    cpu: dict[str, list[int]],
    workdir: Path,
    benchmark: Callable[[], float],
) -> tuple[dict[str, list[float]], dict[tuple[str, int], list[Paced]]]:
    """Capacities (``REDIS_BENCHMARK`` too: ``benchmark()`` in each repeat, so that
    every ratio to it is of the same minutes), then latencies at shares of them
    (:data:`PACED_RUNS`)."""
    capacity: dict[str, list[float]] = {name: [] for name in ports}
    capacity[REDIS_BENCHMARK] = []
    for _ in range(repeats):
        capacity[REDIS_BENCHMARK].append(benchmark())
        for name, port in ports.items():
            before = cpu_seconds(cpu[name])
            if shutil.which("wrk"):
                rate = wrk_rate(port, seconds, workdir)
            else:
                rate = asyncio.run(http_rate(port, 64, seconds, "/v1/search", {}))
            used = cpu_seconds(cpu[name]) - before
            capacity[name].append(rate)
            CPU_PER_REQUEST.setdefault(name, []).append(1e6 * used / (rate * seconds))
    latencies: dict[tuple[str, int], list[Paced]] = {}
    for share in (50, 90):
        for _ in range(repeats):
            for label, (name, rate_of) in PACED_RUNS.items():
                rate = median(capacity[rate_of]) * share / 100
                latencies.setdefault((label, share), []).append(
                    paced(ports[name], rate, seconds)
                )
    return capacity, latencies


#: EVALSHA of the same script by ``redis-benchmark``: the ceiling, measured in each repeat
REDIS_BENCHMARK = "redis-benchmark"
#: the module with a pooled connection per call instead of the worker's auto-pipelining
PER_CALL = "module, a connection per call"
#: the variants answering 204 themselves (no upstream): where a decision's cost goes
ITSELF, FLOOR_NAME = "module answering itself", "EVALSHA floor"
ITSELF_PER_CALL = "module answering itself, a connection per call"
ITSELF_2 = "module answering itself, 2 workers"
PLAIN_204 = "no limit, answering itself"
#: the variants measured for capacity only
CAPACITY_ONLY = (ITSELF_PER_CALL, ITSELF_2)
#: the runs at set rates: label -> (the gateway, whose capacity the rates are shares of)
PACED_RUNS = {
    "no limit": ("no limit", "module"),
    "limit_req": ("limit_req", "module"),
    "module": ("module", "module"),
    PER_CALL: (PER_CALL, PER_CALL),
    "forward-auth": ("forward-auth", "forward-auth"),
    PLAIN_204: (PLAIN_204, ITSELF),
    ITSELF: (ITSELF, ITSELF),
    f"{PLAIN_204}, at the floor's rates": (PLAIN_204, FLOOR_NAME),
    FLOOR_NAME: (FLOOR_NAME, FLOOR_NAME),
}
#: what each paced run's p99 is compared with: the nginx without a limit at the same rate
#: (the connection per call and forward-auth, at rates of their own, are not compared)
ADDED = {
    "module": "no limit",
    ITSELF: PLAIN_204,
    FLOOR_NAME: f"{PLAIN_204}, at the floor's rates",
}

#: µs of CPU per request, per gateway (nginx's worker; forward-auth: and the service's)
CPU_PER_REQUEST: dict[str, list[float]] = {}


def report(
    capacity: dict[str, list[float]],
    latencies: dict[tuple[str, int], list[Paced]],
    evalsha: list[float],
    redis_us: float,
) -> None:
    rate = {name: median(values) for name, values in capacity.items()}
    print(
        "| nginx | requests/s at 64 connections | rates paced (50 % / 90 % of) "
        "| p50 / p99 ms at 50 % | p50 / p99 ms at 90 % |"
    )
    print("|---|---|---|---|---|")
    for label, (name, rate_of) in PACED_RUNS.items():
        cells = [
            spread(capacity[name], 0) if label == name else "",
            f"{rate[rate_of] * 0.5:.0f} / {rate[rate_of] * 0.9:.0f} ({rate_of})",
        ]
        for share in (50, 90):
            runs = latencies[(label, share)]
            cells.append(
                f"{spread([r.p50 for r in runs], 2)} / {spread([r.p99 for r in runs], 2)}"
            )
        print(f"| {label} | " + " | ".join(cells) + " |")
    print(
        "\nLatency by wrk at a set rate (32 connections, exponential gaps, each "
        "request timed from its send; bench/gateway_load.py). Rates reached, "
        "medians at 50 % and 90 %: "
        + "; ".join(
            f"{label} {median(r.per_s for r in latencies[(label, 50)]):.0f} and "
            f"{median(r.per_s for r in latencies[(label, 90)]):.0f}"
            for label in PACED_RUNS
        )
        + f". Errors: {sum(r.errors for runs in latencies.values() for r in runs)}.\n"
    )
    for label, baseline in ADDED.items():
        for share in (50, 90):
            added = [
                m.p99 - n.p99
                for m, n in zip(
                    latencies[(label, share)], latencies[(baseline, share)], strict=True
                )
            ]
            print(
                f"- p99 added by the {label} at {share} % of its capacity, against "
                f"{baseline}: {spread(added, 2)} ms (target at 50 %: under 1 ms)"
            )
    print(
        "- CPU per request (µs): "
        + ", ".join(f"{name} {spread(CPU_PER_REQUEST[name], 0)}" for name in capacity)
        + " (forward-auth: nginx and the decision service)"
    )
    print(
        f"- redis-benchmark EVALSHA of the same script (50 clients, in each repeat): "
        f"{spread(evalsha, 0)}/s; Redis spends {redis_us:.1f} µs per EVALSHA of the gateways'"
    )
    for name in ("module", PER_CALL, ITSELF, ITSELF_PER_CALL, ITSELF_2, FLOOR_NAME):
        ratios = [c / b for c, b in zip(capacity[name], evalsha, strict=True)]
        print(
            f"- {name}: {spread(capacity[name], 0)}/s = {spread(ratios, 2)} x "
            f"redis-benchmark within each repeat (target, answering itself: at least "
            f"0.5), {spread(CPU_PER_REQUEST[name], 0)} µs of CPU per request"
        )
    ratios = [
        a / b for a, b in zip(capacity[ITSELF], capacity[ITSELF_PER_CALL], strict=True)
    ]
    print(
        f"- auto-pipelined against a connection per call, answering itself: "
        f"{spread(ratios, 2)} x within each repeat; proxying: "
        f"{rate['module'] / rate[PER_CALL]:.2f} x; the floor: {rate[ITSELF] / rate[FLOOR_NAME]:.2f} x"
    )
    print(
        f"- the module's capacity is {rate['module'] / rate['no limit']:.2f} x "
        f"nginx without a limit, {rate['module'] / rate['forward-auth']:.2f} x forward-auth\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    print(
        f"## nginx with Sluice's Lua module (bench/nginx_module.py)\n\n{machine_line()}.\n"
    )
    workdir = Path(tempfile.mkdtemp(prefix="sluice-bench-nginx-"))
    store = RedisServer().start()
    rules_server = ProtocolServer().start()
    bundle = Bundle(load_rules(TENANTS))
    rules_server.serve(bundle)
    control_plane = int(rules_server.url.split(":")[2].split("/")[0])
    service = servers.DecisionService(
        rules_server.url.removesuffix("/api/v1/snapshot"),
        rules_server.token,
        store.url,
        workdir,
        gateway_id="bench-decide",
        poll_interval=5.0,
        redis_timeout=1.0,
    )
    started: list = []

    def module(gateway_id: str, *, pipelining: bool = True):
        """nginx with the module on the bench's Redis and rules (``pipelining``:
        its script calls auto-pipelined, else a pooled connection per call)."""
        return servers.nginx_module(
            workdir,
            port=free_port(),
            backend=upstream.port,
            control_plane=control_plane,
            redis=store.port,
            token=rules_server.token,
            gateway_id=gateway_id,
            poll_interval=5.0,
            options="" if pipelining else "redis_pipelining = false,",
        )

    try:
        started.append(service.start().wait_version(1))
        upstream = upstream_envoy(workdir).start()
        started.append(upstream)
        gateways = {
            "no limit": plain_nginx(workdir, backend=upstream.port, limit=False),
            "limit_req": plain_nginx(workdir, backend=upstream.port, limit=True),
            PLAIN_204: answering_itself(
                plain_nginx(workdir, backend=upstream.port, limit=False)
            ),
            "module": module("bench-nginx-module"),
            PER_CALL: module("bench-nginx-per-call", pipelining=False),
            "forward-auth": servers.nginx(
                workdir,
                port=free_port(),
                backend=upstream.port,
                http=service.http_port,
            ),
            ITSELF: answering_itself(module("bench-nginx-itself")),
            ITSELF_2: two_workers(answering_itself(module("bench-nginx-itself-2"))),
            ITSELF_PER_CALL: answering_itself(
                module("bench-nginx-itself-per-call", pipelining=False)
            ),
            FLOOR_NAME: evalsha_floor(workdir, store.port, bundle),
        }
        for process in gateways.values():
            started.append(process.start())
        time.sleep(2)  # the module's first poll
        ports = {name: process.port for name, process in gateways.items()}
        cpu = {
            name: children(process.process.pid) for name, process in gateways.items()
        }
        cpu["forward-auth"].append(service.process.process.pid)
        client = redis.Redis(port=store.port)
        client.config_resetstat()
        excluded = [0, 0]  # redis-benchmark's own EVALSHA calls and µs

        def benchmark() -> float:
            rate, calls, usec = redis_benchmark(store.port, bundle, options.seconds)
            excluded[0] += calls
            excluded[1] += usec
            return rate

        capacity, latencies = measure(
            ports, options.seconds, options.repeats, cpu, workdir, benchmark
        )
        calls, usec = evalsha_stats(client)  # the module's and the service's
        evalsha = capacity.pop(REDIS_BENCHMARK)
        calls, usec = calls - excluded[0], usec - excluded[1]
        report(capacity, latencies, evalsha, usec / max(1, calls))
        print(f"After the run: {machine_line()}.")
    finally:
        for process in reversed(started):
            process.stop()
        rules_server.stop()
        store.cleanup()


if __name__ == "__main__":
    main()
