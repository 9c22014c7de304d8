"""The decision service passes the corpus, over HTTP (forward-auth) and over gRPC (Envoy's RLS).

One ``sluice-decide`` on the scenarios' Redis and one on a Redis that does not
answer (the ``down`` scenarios), both polling a control plane that serves the
corpus' rules and writing decision events to a Redis of their own; the
answers, the scripts they run, the keys they leave and the events they write
must be the corpus'. Over gRPC, a scenario whose requests must end before the
next starts (``release``) is skipped: Envoy's RLS has no end of request.
"""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
import redis
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

from tests.client.protocol_server import ProtocolServer
from tests.conformance import corpus, observe
from tests.conformance.corpus import Answer
from tests.conformance.runners import run_corpus
from tests.gateways import servers
from tests.servers import RedisServer, free_port


@pytest.fixture(scope="module")
def events_redis() -> Iterator[RedisServer]:
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture
def services(redis_server, redis_client, events_redis, tmp_path):
    """(up, down): a service on the scenarios' Redis and one on a dead Redis."""
    redis.Redis.from_url(events_redis.url).flushdb()
    rules_server = ProtocolServer().start()
    rules_server.serve(corpus.bundle())
    started = []
    for name, url in (
        ("conformance-up", redis_server.url),
        ("conformance-down", f"redis://127.0.0.1:{free_port()}/0"),
    ):
        service = servers.DecisionService(
            rules_server.url.removesuffix("/api/v1/snapshot"),
            rules_server.token,
            url,
            tmp_path,
            gateway_id=name,
            extra=("--events-redis", events_redis.url),
        )
        started.append(service.start().wait_version(corpus.VERSION))
    yield tuple(started)
    for service in started:
        service.stop()
    rules_server.stop()


@pytest.fixture
def monitor(redis_server) -> Iterator[observe.Monitor]:
    watching = observe.Monitor(redis_server.port)
    yield watching
    watching.close()


def _answer(response: Any) -> Answer:
    headers = {k.lower(): v for k, v in response.headers.items()}
    return Answer(response.status, headers, response.read())


def http_decide(service: servers.DecisionService, *, release: bool):
    base = f"http://127.0.0.1:{service.http_port}"

    def decide(request: dict[str, Any], arguments: dict[str, Any]) -> Answer:
        ask = urllib.request.Request(
            base + "/v1/decide", headers=corpus.forward_auth_headers(request)
        )
        try:
            with urllib.request.urlopen(ask, timeout=30) as response:
                answer = _answer(response)
        except urllib.error.HTTPError as error:
            answer = _answer(error)
        token = answer.headers.get("sluice-release")
        if release and token:
            done = urllib.request.Request(
                base + "/v1/release", method="POST", headers={"Sluice-Release": token}
            )
            urllib.request.urlopen(done, timeout=30).close()
        return answer

    return decide


def grpc_decide(stub: Any):
    def decide(request: dict[str, Any], arguments: dict[str, Any]) -> Answer:
        entries = [
            (key, arguments[field])
            for key, field in (
                ("method", "method"),
                ("path", "path"),
                ("tenant", "tenant"),
                ("user", "user"),
                ("api_key", "api_key"),
                ("remote_address", "ip"),
            )
            if arguments[field] is not None
        ]
        descriptor = ratelimit_pb2.RateLimitDescriptor(
            entries=[
                ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v)
                for k, v in entries
            ]
        )
        asked = rls_pb2.RateLimitRequest(
            domain="sluice",
            descriptors=[descriptor],
            hits_addend=arguments["cost"] or 0,
        )
        reply = stub.ShouldRateLimit(asked, timeout=30)
        status = 200
        if reply.overall_code == rls_pb2.RateLimitResponse.OVER_LIMIT:
            status = int(reply.dynamic_metadata.fields["status"].number_value or 429)
        headers = {h.key.lower(): h.value for h in reply.response_headers_to_add}
        return Answer(status, headers, reply.raw_body)

    return decide


def _events_problems(events_redis: RedisServer) -> list[str]:
    expected = corpus.expected_events(corpus.corpus())
    found = corpus.wait_events(redis.Redis.from_url(events_redis.url), expected)
    return (
        [] if found == expected else [f"events {found - expected} {expected - found}"]
    )


def test_corpus__decision_service_http__passes(
    services, redis_client, monitor, events_redis
):
    # Given the service on the scenarios' Redis, and one on a dead Redis
    up, down = services

    # When each scenario is asked of it over forward-auth
    def implementation(scenario):
        service = down if scenario.get("redis") == "down" else up
        return http_decide(service, release=bool(scenario.get("release")))

    problems, skipped = run_corpus(implementation, client=redis_client, monitor=monitor)
    # Then every answer, script call, key and decision event is the corpus'
    assert problems == []
    assert skipped == []
    assert _events_problems(events_redis) == []


def test_corpus__decision_service_grpc__passes(
    services, redis_client, monitor, events_redis
):
    # Given the service on the scenarios' Redis, and one on a dead Redis
    up, down = services
    channels = {
        service.gateway_id: grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}")
        for service in (up, down)
    }

    # When each scenario is asked of it over Envoy's RLS
    def implementation(scenario):
        if scenario.get("release"):
            return None  # RLS says nothing when a request ends
        service = down if scenario.get("redis") == "down" else up
        return grpc_decide(
            rls_pb2_grpc.RateLimitServiceStub(channels[service.gateway_id])
        )

    try:
        problems, skipped = run_corpus(
            implementation, client=redis_client, monitor=monitor
        )
    finally:
        for channel in channels.values():
            channel.close()
    # Then every answer, script call and key is the corpus'
    assert problems == []
    assert skipped == [s["name"] for s in corpus.corpus() if s.get("release")]
