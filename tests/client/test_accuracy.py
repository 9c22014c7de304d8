"""Accuracy under contention: processes and threads hammering one bucket."""

from __future__ import annotations

import multiprocessing

import pytest

from bench.accuracy import async_worker, one_bucket, redis_seconds, worker

#: A rate the workers outrun many times over even on a loaded machine, and a burst
#: that holds half a second of it: the bucket stays saturated through the pauses a
#: busy scheduler gives them, so that what is counted is the limiter, not the load.
RATE, BURST, SECONDS = 100, 50, 2.0
PROCESSES, THREADS = 3, 2
#: The bench's workers decide with a 1 s Redis timeout; options in the URL win over
#: the client's own (redis-py), so these give them one no healthy call reaches on a
#: loaded machine: a decision is Redis's, never degraded by slowness.
PATIENT = "?socket_timeout=5&socket_connect_timeout=5"


@pytest.mark.parametrize("decide", [worker, async_worker], ids=["sync", "asyncio"])
def test_decide__processes_and_threads_on_one_key__admits_capacity_plus_rate(
    redis_server, redis_client, decide
):
    # Given 3 processes of 2 threads each (or 32 tasks of one auto-pipelined asyncio
    # limiter), deciding on one tenant's bucket (100/s, burst 50)
    # (the workers of bench/accuracy.py, with a plain limit)
    raw = one_bucket(RATE, BURST).to_bytes()
    context = multiprocessing.get_context("spawn")
    start, results = context.Event(), context.Queue()
    args = (redis_server.url + PATIENT, raw, THREADS, SECONDS, start, results)
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
