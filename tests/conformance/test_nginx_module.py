"""nginx with Sluice's Lua module passes the corpus: the same answers, scripts, keys and events.

Debian's nginx with ``libnginx-mod-http-lua``, ``lua-cjson`` and
``lua-nginx-redis`` (``.ci/apt-packages``) runs ``docs/gateways/nginx-module.conf``
twice: on the scenarios' Redis, and on a Redis that does not answer (the
``down`` scenarios). Both poll a control plane serving the corpus' rules, in
front of the test backend, and write decision events to a Redis of their own.
Requests go through nginx as a client sends them; nginx ends each request
before the next, so it frees concurrency slots itself (``release`` scenarios).
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from tests.celery_fixtures import wait_until
from tests.client.protocol_server import ProtocolServer
from tests.conformance import corpus, observe
from tests.conformance.corpus import Answer
from tests.conformance.runners import run_corpus
from tests.gateways import servers
from tests.gateways.backend import Backend
from tests.servers import RedisServer, free_port


@pytest.fixture(scope="module")
def events_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture(scope="module")
def backend() -> Iterator[Backend]:
    server = Backend().start()
    yield server
    server.stop()


def applied(rules_server: ProtocolServer, gateway_id: str, version: int) -> bool:
    """Whether ``gateway_id`` reported running ``version`` (on its next poll)."""
    return any(
        r.get("Sluice-Gateway-Id") == gateway_id
        and r.get("Sluice-Applied-Version") == str(version)
        for r in list(rules_server.requests)
    )


@pytest.fixture
def gateways(redis_server, redis_client, events_redis, backend, tmp_path):
    """(up, down) nginx ports: on the scenarios' Redis, and on a dead one."""
    redis.Redis.from_url(events_redis.url).flushdb()
    rules_server = ProtocolServer().start()
    rules_server.serve(corpus.bundle())
    control_plane = int(rules_server.url.split(":")[2].split("/")[0])
    started, ports = [], []
    for name, redis_port in (
        ("nginx-module-up", redis_server.port),
        ("nginx-module-down", free_port()),
    ):
        port = free_port()
        process = servers.nginx_module(
            tmp_path,
            port=port,
            backend=backend.port,
            control_plane=control_plane,
            redis=redis_port,
            token=rules_server.token,
            events_redis=events_redis.port,
            gateway_id=name,
        )
        started.append(process.start())
        ports.append(port)
        wait_until(
            lambda name=name: applied(rules_server, name, corpus.VERSION),
            timeout=60,
            every=0.05,
            why=f"{name} to apply the corpus' rules",
        )
    yield tuple(ports)
    for process in started:
        process.stop()
    rules_server.stop()


@pytest.fixture
def monitor(redis_server) -> Iterator[observe.Monitor]:
    watching = observe.Monitor(redis_server.port)
    yield watching
    watching.close()


def through(port: int):
    """A request through nginx on ``port``, as a client sends it."""

    def decide(request: dict[str, Any], arguments: dict[str, Any]) -> Answer:
        sent = urllib.request.Request(
            f"http://127.0.0.1:{port}{request['target']}",
            headers=request.get("headers", {}),
            method=request["method"],
        )
        try:
            with urllib.request.urlopen(sent, timeout=30) as response:
                status, raw, body = response.status, response.headers, response.read()
        except urllib.error.HTTPError as error:
            status, raw, body = error.code, error.headers, error.read()
        return Answer(status, {k.lower(): v for k, v in raw.items()}, body)

    return decide


def test_corpus__nginx_module__passes(gateways, redis_client, monitor, events_redis):
    # Given nginx with the module on the scenarios' Redis, and one on a dead Redis
    up, down = gateways

    # When each scenario's requests go through it
    def implementation(scenario):
        return through(down if scenario.get("redis") == "down" else up)

    problems, skipped = run_corpus(implementation, client=redis_client, monitor=monitor)
    # Then every answer, script call and key is the corpus'
    assert problems == []
    assert skipped == []
    # and so is every decision event it wrote to the stream
    expected = corpus.expected_events(corpus.corpus())
    found = corpus.wait_events(redis.Redis.from_url(events_redis.url), expected)
    assert found == expected
