"""Accuracy under contention: processes and threads hammering one bucket."""

from __future__ import annotations

import multiprocessing

import pytest

from bench.accuracy import async_worker, one_bucket, redis_seconds, worker

RATE, BURST, SECONDS = 400, 50, 2.0
PROCESSES, THREADS = 3, 2


@pytest.mark.parametrize("decide", [worker, async_worker], ids=["sync", "asyncio"])
def test_decide__processes_and_threads_on_one_key__admits_capacity_plus_rate(
    redis_server, redis_client, decide
):
    # Given 3 processes of 2 threads each (or 32 tasks of one auto-pipelined asyncio
    # limiter), deciding on one tenant's bucket (400/s, burst 50)
    # (the workers of bench/accuracy.py, with a plain limit)
    raw = one_bucket(RATE, BURST).to_bytes()
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    args = (redis_server.url, raw, THREADS, SECONDS, start, results)
    processes = [context.Process(target=decide, args=args) for _ in range(PROCESSES)]
    for process in processes:
        process.start()
    # When they all hammer it for 2 seconds
    began = redis_seconds(redis_client)
    start.set()
    counts = [results.get(timeout=60) for _ in processes]
    ended = redis_seconds(redis_client)
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
