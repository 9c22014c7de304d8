"""``make bench``: every benchmark and fault scenario in one run, written to one report.

Starts a private redis-server for the control plane, re-creates the bench
database (``DATABASE_URL`` + ``_bench``), then runs each part in its own
process and collects what it prints into ``var/bench/report.md``:

1. the client's decision benchmark (``bench/decisions.py``), then the client
   against bare redis-py and alisaifee/limits in a gateway's environment
   (``bench/peers.py``, in ``var/bench/peers-venv``);
2. scale of rules (``bench/scale.py``): 100k tenants, publish, load, resolve;
   rules as code at that scale (``bench/rules_ascode.py``): export, diff, apply;
3. the impact estimate of a lowering reaching 1,000 tenants on 7 days of traffic
   (``bench/impact.py``); then snapshot polling (``bench/polling.py``) against
   gunicorn, on the rules of step 2;
4. decisions under load (``bench/load.py``): one Redis and a 3-master cluster;
5. accuracy under concurrency (``bench/accuracy.py``);
6. accuracy with a stalling Redis, through the demo gateway (``bench/stall.py``);
7. Postgres restarted during a publish, on a private cluster (``bench/pg_restart.py``);
8. health endpoints and the request log (``bench/health.py``);
9. the audit log's hash chain: appends, verification (``bench/audit_chain.py``);
10. nginx enforcing with Sluice's Lua module (``bench/nginx_module.py``), and
    its Redis timeout on a busy machine (``bench/nginx_timeout.py``);
11. the gateways through the decision service, Envoy (RLS and ext_authz), nginx,
    HAProxy and Traefik, against their own limiters (``bench/gateway_speed.py``);
    and what an asyncio process pays per Redis script call, the client's
    auto-pipeline against a bare protocol (``bench/redis_lane.py``);
12. the fault scenarios (``tests/faults``, run by pytest; their ``fault:`` lines).

``--quick`` shrinks every part (a smoke run of a few minutes). Never asserts
on time; a part that fails is reported as failed and the others still run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from bench.common import PYTHON, ROOT, bench_env, fresh_database, machine_line
from bench.peers_env import peers_python
from tests.servers import RedisServer

REPORT = ROOT / "var" / "bench" / "report.md"


@dataclass(frozen=True)
class Part:
    """One bench to run: its title, its command, and how long it may take."""

    title: str
    args: tuple[str, ...]
    quick: tuple[str, ...]  #: extra arguments for ``--quick``
    timeout: float = 600.0
    django: bool = False  #: runs Django on the bench database
    #: the interpreter, when not the control plane's (a gateway's environment)
    python: Callable[[], Path] | None = None


def parts(redis_url: str) -> list[Part]:
    return [
        Part(
            "Client decisions vs raw EVALSHA",
            ("-m", "bench.decisions", "--ops", "2000", "--repeats", "3"),
            ("--ops", "500"),
        ),
        Part(
            "The client against its peers",
            ("bench/peers.py", "--ops", "3000", "--repeats", "5"),
            ("--ops", "500", "--repeats", "3"),
            timeout=900,
            python=peers_python,
        ),
        Part(
            "Scale of rules",
            ("-m", "bench.scale"),
            ("--tenants", "10000", "--overrides", "2000", "--ops", "5000"),
            timeout=540,
            django=True,
        ),
        Part(
            "Rules as code at scale",
            ("-m", "bench.rules_ascode"),
            ("--tenants", "10000", "--overrides", "2000"),
            timeout=1800,
            django=True,
        ),
        Part(
            "Impact estimate",
            ("-m", "bench.impact"),
            ("--tenants", "200", "--days", "2", "--repeats", "3"),
            timeout=420,
            django=True,
        ),
        Part(
            "Snapshot polling",
            ("-m", "bench.polling", "--redis-url", redis_url, "--repeats", "5"),
            (
                "--repeats",
                "2",
                "--seconds",
                "2",
                "--gateways",
                "200",
                "--fleet-seconds",
                "6",
            ),
        ),
        Part(
            "Decisions under load",
            ("-m", "bench.load"),
            ("--repeats", "1", "--seconds", "2", "--buckets", "10000"),
        ),
        Part(
            "Accuracy under concurrency",
            ("-m", "bench.accuracy", "--seconds", "30"),
            ("--seconds", "5"),
        ),
        Part(
            "Accuracy with a stalling Redis",
            ("-m", "bench.stall"),
            ("--seconds", "15", "--reference-seconds", "5"),
            timeout=300,
        ),
        Part(
            "Postgres restarted during a publish",
            ("-m", "bench.pg_restart"),
            ("--tenants", "5000"),
            timeout=300,
        ),
        Part(
            "Health endpoints and the request log",
            ("-m", "bench.health", "--redis-url", redis_url),
            ("--requests", "50", "--repeats", "1"),
            timeout=300,
            django=True,
        ),
        Part(
            "Audit chain",
            ("-m", "bench.audit_chain"),
            ("--entries", "3000"),
            timeout=300,
            django=True,
        ),
        Part(
            "nginx with Sluice's Lua module",
            ("-m", "bench.nginx_module", "--seconds", "3", "--repeats", "3"),
            ("--seconds", "1", "--repeats", "1"),
            timeout=600,
        ),
        Part(
            "The nginx module's Redis timeout",
            ("-m", "bench.nginx_timeout", "--seconds", "5", "--hogs", "2"),
            ("--seconds", "1", "--hogs", "0"),
            timeout=600,
        ),
        Part(
            "Gateway speed",
            ("-m", "bench.gateway_speed", "--seconds", "3", "--repeats", "3"),
            ("--quick",),
            timeout=1500,
        ),
        Part(
            "A Redis script call from asyncio",
            ("-m", "bench.redis_lane", "--seconds", "3", "--repeats", "2"),
            ("--seconds", "1", "--repeats", "1"),
            timeout=300,
        ),
        Part(
            "Faults",
            ("-m", "pytest", "tests/faults", "-q", "-s", "-p", "no:cacheprovider"),
            (),
        ),
    ]


def run_part(part: Part, env: dict[str, str], quick: bool) -> tuple[str, float, bool]:
    """Run one part; return its output (or its failure), seconds taken, and success."""
    python = str(part.python()) if part.python else PYTHON
    command = [python, *part.args, *(part.quick if quick else ())]
    began = time.perf_counter()
    try:
        done = subprocess.run(
            command,
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=part.timeout,
        )
    except subprocess.TimeoutExpired as exc:
        output = (
            exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        )
        return (
            output + f"\n\n**timed out after {part.timeout:.0f} s**\n",
            part.timeout,
            False,
        )
    seconds = time.perf_counter() - began
    output = done.stdout
    if part.args[1:2] == ("pytest",):
        output = fault_lines(done.stdout)
    elif not output.startswith("## "):  # bench/decisions.py prints a fixed-width table
        output = f"## {part.title}\n\n```\n{output.strip()}\n```\n"
    if done.returncode != 0:
        output += f"\n\n**failed (exit {done.returncode})**\n\n```\n{done.stderr[-3000:]}\n{done.stdout[-2000:]}\n```\n"
    return output, seconds, done.returncode == 0


def fault_lines(output: str) -> str:
    """The figures the fault tests print, and pytest's summary line."""
    lines = [
        line.split("fault: ", 1)[1] for line in output.splitlines() if "fault: " in line
    ]
    summary = [
        line for line in output.splitlines() if " passed" in line or " failed" in line
    ]
    body = "\n".join(f"- {line}" for line in lines)
    return f"## Faults (tests/faults)\n\n{body}\n\npytest: {summary[-1] if summary else 'no summary'}\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run")
    parser.add_argument(
        "--only", action="append", help="run parts whose title contains this"
    )
    parser.add_argument("--report", type=Path, default=REPORT)
    options = parser.parse_args()
    redis = RedisServer().start()
    try:
        env = bench_env(redis.url)
        setup = fresh_database(env)
        sections, timings = [], []
        for part in parts(redis.url):
            if options.only and not any(
                o.lower() in part.title.lower() for o in options.only
            ):
                continue
            print(f"bench: {part.title} ...", flush=True)
            part_env = env if part.django else {**os.environ, "PYTHONPATH": str(ROOT)}
            if part.python:  # its own environment: the repository goes last on its path
                part_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
            output, seconds, ok = run_part(part, part_env, options.quick)
            sections.append(output)
            timings.append((part.title, seconds, ok))
            print(
                f"bench: {part.title}: {seconds:.0f} s{'' if ok else ' (FAILED)'}",
                flush=True,
            )
    finally:
        redis.cleanup()
    write_report(options.report, sections, timings, setup, options.quick)


def write_report(path: Path, sections, timings, setup: float, quick: bool) -> None:
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    ).stdout.strip()
    total = setup + sum(seconds for _, seconds, _ in timings)
    head = [
        "# Sluice benchmark report",
        "",
        f"{time.strftime('%Y-%m-%d %H:%M:%S %Z')}, commit {commit or '?'}"
        f"{', quick run' if quick else ''}; {machine_line()}.",
        "",
        f"Bench database set up in {setup:.0f} s; total {total / 60:.1f} min.",
        "",
        "| part | seconds | ok |",
        "|---|---|---|",
        *[
            f"| {title} | {seconds:.0f} | {'yes' if ok else '**no**'} |"
            for title, seconds, ok in timings
        ],
        "",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(head) + "\n" + "\n\n".join(sections))
    print(f"bench: report written to {path} ({total / 60:.1f} min)")
    if not all(ok for _, _, ok in timings):
        sys.exit(1)


if __name__ == "__main__":
    main()
