"""Accuracy under contention: processes and threads hammering one bucket."""

from __future__ import annotations

import multiprocessing

import redis

from tests.enforcement.factories import limit, policy, rules, snapshot
from tests.enforcement.hammer import hammer

RATE, BURST, SECONDS = 400, 50, 2.0
PROCESSES, THREADS = 3, 2


def server_time(client: redis.Redis) -> float:
    seconds, micros = client.time()
    return seconds + micros / 1_000_000


def test_decide__processes_and_threads_on_one_key__admits_capacity_plus_rate(
    redis_server, redis_client
):
    # Given 3 processes of 2 threads each, deciding on one tenant's bucket (400/s, burst 50)
    rules_ = snapshot(rules(policy("default", "*", limit("tenant", RATE, 1, BURST))))
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    args = (redis_server.url, rules_.to_bytes(), THREADS, SECONDS, start, results)
    processes = [context.Process(target=hammer, args=args) for _ in range(PROCESSES)]
    for process in processes:
        process.start()
    # When they all hammer it for 2 seconds
    began = server_time(redis_client)
    start.set()
    counts = [results.get(timeout=60) for _ in processes]
    ended = server_time(redis_client)
    for process in processes:
        process.join(timeout=30)
    admitted, rejected, degraded = map(sum, zip(*counts, strict=True))
    print(f"admitted {admitted}, rejected {rejected}, elapsed {ended - began:.3f} s")
    # Then no more than capacity + rate x elapsed (Redis time) was admitted,
    # and at least 95% of capacity + rate x the hammering time
    assert degraded == 0
    assert rejected > admitted  # the bucket was saturated all along
    assert admitted <= BURST + RATE * (ended - began)
    assert admitted >= 0.95 * (BURST + RATE * SECONDS)
