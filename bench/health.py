"""Health endpoints and the request log: what each costs a web process.

One gunicorn sync worker on the bench database and a private Redis; one client
sending ``--requests`` requests back to back (after a warm-up), each kind in
turn, ``--repeats`` rotations; p50 and p99 of each kind, median over rotations.

1. ``/healthz`` and ``/readyz`` (one query, one Redis PING) against the trivial
   view (``/bench/ping``, the whole middleware stack).
2. The trivial view with the request log off (``LOG_LEVEL=WARNING``), on in
   plain text and on in JSON (``SLUICE_LOG_FORMAT=json``): a server each.

Needs the bench database migrated and a private Redis (``bench/run.py``
prepares both). Prints Markdown; asserts nothing.
"""

from __future__ import annotations

import argparse
import asyncio

from bench.common import bench_env, machine_line, median, table
from bench.httpclient import Block, get
from tests.servers import ControlPlaneServer


async def block(port: int, path: str, requests: int) -> Block:
    replies = []
    began = asyncio.get_running_loop().time()
    for _ in range(requests):
        replies.append(await get(port, path, {}))
    return Block(replies, asyncio.get_running_loop().time() - began)


async def measure(port: int, paths: list[str], requests: int, repeats: int):
    """p50 and p99 (ms) per path, median over rotations, and errors in all."""
    for path in paths:  # warm-up: connections, caches, the migration graph
        await block(port, path, 20)
    found: dict[str, list[Block]] = {path: [] for path in paths}
    for _ in range(repeats):
        for path in paths:
            found[path].append(await block(port, path, requests))
    return {
        path: (
            median(b.latency_ms(0.5) for b in blocks),
            median(b.latency_ms(0.99) for b in blocks),
            sum(sum(1 for r in b.replies if r.status != 200) for b in blocks),
        )
        for path, blocks in found.items()
    }


def serve(env: dict[str, str], port: int) -> ControlPlaneServer:
    return ControlPlaneServer(env, port, 1, settings="bench.settings").start()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--port", type=int, default=8211)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    rows = []
    log_setups = {
        "request log off (LOG_LEVEL=WARNING)": {"LOG_LEVEL": "WARNING"},
        "request log, plain": {"LOG_LEVEL": "INFO"},
        "request log, JSON": {"LOG_LEVEL": "INFO", "SLUICE_LOG_FORMAT": "json"},
    }
    for name, extra in log_setups.items():
        server = serve(bench_env(options.redis_url, **extra), options.port)
        paths = ["/bench/ping"]
        if not rows:  # the health endpoints once, with the log off
            paths += ["/healthz", "/readyz"]
        try:
            found = asyncio.run(
                measure(options.port, paths, options.requests, options.repeats)
            )
        finally:
            server.stop()
        for path, (p50, p99, errors) in found.items():
            rows.append([path, name, f"{p50:.2f}", f"{p99:.2f}", errors])
    print(f"## Health endpoints and the request log\n\n{machine_line()}")
    print(
        f"gunicorn 1 sync worker; one client, {options.requests} requests back to back "
        f"per block, {options.repeats} rotations (median of the blocks' percentiles); "
        "a new connection per request, as the polling bench\n"
    )
    print(table(["path", "server", "p50 ms", "p99 ms", "errors"], rows))


if __name__ == "__main__":
    main()
