"""Resolution per decision, big rules against a tiny rule set on the same requests.

Used by ``bench/scale.py``; pure enforcement code, no Django.
"""

from __future__ import annotations

import random
import time

from bench.common import spread
from sluice import Snapshot
from sluice.engine import Engine
from tests.client.factories import limit, policy, rules, snapshot


def tiny_snapshot(routes: dict) -> Snapshot:
    """Three policies and two tenants on the same routes: the big rules' requests
    resolve here too (unknown tenants get the default policy)."""
    return snapshot(
        rules(
            policy("tier:pro", "r001.read", limit("tenant", 50, 1, 100)),
            policy("tenant:acme", "r001.read", limit("tenant", 500, 1, 1000)),
            routes=routes,
        )
    )


def resolution_us(
    engine: Engine, requests: list[tuple[str, str]], *, cold: bool
) -> float:
    """µs per ``Engine.prepare`` (resolve + keys); ``cold`` empties the resolution cache first."""
    now = time.time()
    began = time.perf_counter()
    for tenant, route in requests:
        if cold:
            engine._cache.clear()
        engine.prepare(
            route=route,
            method=None,
            path=None,
            tenant=tenant,
            user="u1",
            api_key=None,
            ip="10.0.0.1",
            now=now,
        )
    return (time.perf_counter() - began) / len(requests) * 1e6


def resolution_rows(big: Snapshot, ops: int, repeats: int) -> list[list[str]]:
    """Big vs tiny rule set, A/B interleaved, cold (resolver) and warm (cache)."""
    rng = random.Random(7)
    tenants, routes = list(big.rules.tenants), list(big.rules.routes)
    big_requests = [(rng.choice(tenants), rng.choice(routes)) for _ in range(ops)]
    engines = {"100k": Engine(big), "tiny": Engine(tiny_snapshot(big.rules.routes))}
    work = {"100k": big_requests, "tiny": big_requests}  # the same requests for both
    rows = []
    for cold in (True, False):
        results: dict[str, list[float]] = {"100k": [], "tiny": []}
        for repeat in range(repeats):
            order = ["100k", "tiny"] if repeat % 2 == 0 else ["tiny", "100k"]
            for name in order:
                results[name].append(
                    resolution_us(engines[name], work[name], cold=cold)
                )
        ratios = [b / t for b, t in zip(results["100k"], results["tiny"], strict=True)]
        rows.append(
            [
                "resolver (cache emptied)" if cold else "cached resolution",
                spread(results["100k"], 2),
                spread(results["tiny"], 2),
                spread(ratios, 2),
            ]
        )
    return rows
