"""nginx with Sluice's Lua module when Redis fails: a stalled Redis costs the
timeout, then the route's failure mode (for pooled and pipelined calls alike,
Redis paused or killed); what the open mode admitted is charged once Redis is
back; a reload and a graceful quit leave no worker behind.
"""

from __future__ import annotations

import signal

import redis

from tests.celery_fixtures import wait_until
from tests.gateways import servers
from tests.gateways.conftest import (
    all_at_once,
    call,
    decided_by_redis,
    port_of,
    wait_applied,
)
from tests.servers import RedisServer, free_port

#: How long CLIENT PAUSE holds Redis's clients: well past the requests sent meanwhile.
PAUSE_MS = 10_000


def test_nginx_module__redis_back__what_the_open_mode_admitted_is_charged(
    backend, tmp_path, cache_dir, rules_server
):
    # Given nginx whose Redis does not answer, and a route that fails open
    redis_port = free_port()
    port = free_port()
    process = servers.nginx_module(
        tmp_path,
        port=port,
        backend=backend.port,
        control_plane=port_of(rules_server),
        redis=redis_port,
        token=rules_server.token,
        cache=cache_dir,
    ).start()
    revived = None
    try:
        wait_applied(rules_server)
        # When it admits two searches on its own (3 per hour per tenant), then Redis returns
        assert [call(port, "/v1/search", tenant="owed-t").status for _ in range(2)] == [
            200,
            200,
        ]
        revived = RedisServer(port=redis_port).start()
        client = redis.Redis(port=redis_port)
        key = "rl:{tenant:owed-t}:route:search:tenant:owed-t:3600s"
        # Then the bucket is charged those two requests (20 minutes of refill, in µs)
        wait_until(lambda: client.exists(key), timeout=60, every=0.05, why="the charge")
        assert 0 < int(client.get(key)) - redis_now_us(client) <= 2 * 600_000_000
        assert client.pttl(key) > 1_190_000
        # and the next request is decided by Redis, with the charge in its bucket
        answer = call(port, "/v1/search", tenant="owed-t")
        state, _, reset = answer.headers["ratelimit"].rpartition(";t=")
        assert state == '"tenant-h";r=0'
        assert 1200 < int(reset) <= 1800  # three requests' refill, less the time since
    finally:
        process.stop()
        if revived is not None:
            revived.cleanup()


def redis_now_us(client) -> int:
    seconds, micros = client.time()
    return seconds * 1_000_000 + micros


def test_nginx_module__redis_stalls__each_route_fails_its_way_within_the_timeout(
    nginx_on_own_redis, rules_server
):
    # Given nginx with a 200 ms Redis timeout, on a Redis that then stops answering
    port, stalled = nginx_on_own_redis
    wait_applied(rules_server)
    stalled.process.send_signal(signal.SIGSTOP)
    try:
        # When requests come for a route that fails closed and one that fails open
        closed = call(port, "/v1/orders/5", tenant="stall-t")
        opened = call(port, "/v1/search", tenant="stall-t")
    finally:
        stalled.process.send_signal(signal.SIGCONT)
    # Then the first is refused with the limiter's 503, the second admitted by the
    # in-process bucket (its RateLimit fields, marked degraded): the timeout
    # answered, not the client's patience
    assert (closed.status, closed.json()["error"]) == (503, "limiter_unavailable")
    assert closed.headers["retry-after"] == "1"
    assert closed.headers["sluice-degraded"] == "closed"
    assert opened.status == 200
    assert opened.headers["sluice-degraded"] == "open"
    assert "ratelimit" in opened.headers


def test_nginx_module__pipelined_redis_paused_then_killed__failure_modes_then_redis_again(
    nginx_on_own_redis, rules_server
):
    # Given nginx whose worker pipelines its script calls on one connection (the
    # default), with a 200 ms Redis timeout, deciding on Redis
    port, store = nginx_on_own_redis
    requests = [("/v1/orders/5", f"pause-{i}") for i in range(8)]
    requests += [("/v1/search", f"pause-{i}") for i in range(8)]
    wait_applied(rules_server)
    assert decided_by_redis(port, "pause-t")
    # When Redis holds every client's commands (CLIENT PAUSE, longer than the
    # requests take), and requests of both failure modes come at once
    redis.Redis(port=store.port).client_pause(PAUSE_MS, all=True)
    paused = all_at_once(port, requests)
    # Then every one is answered by its route's failure mode, none waits for Redis
    assert [(a.status, a.headers.get("sluice-degraded")) for a in paused] == [
        (503, "closed")
    ] * 8 + [(200, "open")] * 8
    # and once the pause is over, Redis decides again on the same worker
    wait_until(
        lambda: decided_by_redis(port, "pause-t"),
        timeout=60,
        every=0.1,
        why="Redis to decide again after the pause",
    )
    # When Redis is killed (the worker's connection breaks)
    store.kill()
    killed = all_at_once(port, requests)
    # Then the same failure modes answer
    assert [(a.status, a.headers.get("sluice-degraded")) for a in killed] == [
        (503, "closed")
    ] * 8 + [(200, "open")] * 8
    # and a Redis started again on its port decides again (a new connection)
    store.start()
    wait_until(
        lambda: decided_by_redis(port, "pause-t"),
        timeout=60,
        every=0.1,
        why="Redis to decide again after its restart",
    )


def test_nginx_module__reloaded_then_quit_gracefully__new_workers_decide_and_all_end(
    start_nginx, rules_server
):
    # Given nginx deciding on Redis through its worker's pipelined connection
    port, process = start_nginx(port_of(rules_server))
    wait_applied(rules_server)
    assert decided_by_redis(port, "quit-t")
    # When it is reloaded (new workers, each with its own flusher)
    process.process.send_signal(signal.SIGHUP)
    # Then the new workers decide on Redis
    wait_until(
        lambda: decided_by_redis(port, "quit-t"),
        timeout=60,
        every=0.1,
        why="the new workers to decide",
    )
    # and a graceful quit ends every worker: no flusher keeps one waiting
    process.process.send_signal(signal.SIGQUIT)
    assert process.process.wait(timeout=30) == 0
