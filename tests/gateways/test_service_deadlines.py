"""The decision service answers within the gateway's deadline, and records what
the gateway decided without it; its workers share the ports.

``sluice-decide`` runs as a subprocess on a private Redis that the tests hold
with ``CLIENT PAUSE … WRITE`` for a minute and release themselves: the service
has to answer by its deadline while Redis says nothing, however slow the machine
(the service's own Redis timeout is 30 s, so only the deadline can end a call).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
import urllib.error
import urllib.request
from collections import Counter
from contextlib import contextmanager, suppress

import grpc
import pytest
import redis
from envoy.config.core.v3 import base_pb2
from envoy.data.accesslog.v3 import accesslog_pb2
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.accesslog.v3 import als_pb2, als_pb2_grpc
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

from sluice import STREAM_KEY, Bundle
from tests.celery_fixtures import wait_until
from tests.client.factories import ROUTES, limit, policy, rules, snapshot
from tests.client.protocol_server import ProtocolServer
from tests.gateways import servers
from tests.servers import RedisServer

Response = rls_pb2.RateLimitResponse

#: 3 an hour per tenant on every route: nothing refills during a test.
RULES = snapshot(
    rules(policy("default", "*", limit("tenant", 3, 3600, 3)), routes=ROUTES)
)
SEARCH = {"method": "GET", "path": "/v1/search"}  # fails open
ORDER = {"method": "GET", "path": "/v1/orders/7"}  # fails closed


@pytest.fixture
def private_redis():
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture
def start(private_redis, tmp_path):
    """Start ``sluice-decide`` with given settings on the private Redis."""
    started = []

    def run(*, served=RULES, **settings) -> servers.DecisionService:
        rules_server = ProtocolServer().start()
        rules_server.serve(Bundle(served))
        service = servers.DecisionService(
            rules_server.url.removesuffix("/api/v1/snapshot"),
            rules_server.token,
            private_redis.url,
            tmp_path,
            **settings,
        )
        started.append((service, rules_server))
        return service.start().wait_version(served.version)

    yield run
    for service, rules_server in started:
        service.stop()
        rules_server.stop()


@contextmanager
def redis_held(url):
    """Redis runs no script (and takes no event) until the block ends."""
    admin = redis.Redis.from_url(url)
    admin.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")
    try:
        yield
    finally:
        admin.execute_command("CLIENT", "UNPAUSE")


@contextmanager
def rls_of(service):
    """An RLS client of the service, as Envoy calls it."""
    channel = grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}")
    try:
        yield rls_pb2_grpc.RateLimitServiceStub(channel)
    finally:
        channel.close()


def request(tenant: str, entries: dict[str, str]):
    return rls_pb2.RateLimitRequest(
        domain="sluice",
        descriptors=[
            ratelimit_pb2.RateLimitDescriptor(
                entries=[
                    ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v)
                    for k, v in {**entries, "tenant": tenant}.items()
                ]
            )
        ],
    )


def outcomes_in_stream(url, *, expected: int) -> Counter:
    """(tenant, outcome) counts in the decision stream, once it holds ``expected``."""

    def counted():
        counts: Counter = Counter()
        for _, fields in redis.Redis.from_url(url).xrange(STREAM_KEY):
            for record in json.loads(fields[b"events"]):
                counts[(record[1], record[5])] += record[-1]
        return counts if sum(counts.values()) >= expected else None

    return wait_until(counted, timeout=60, every=0.1, why=f"{expected} events")


def wait_deciding(service) -> None:
    """Until the service is deciding a call (waiting on the held Redis)."""
    wait_until(
        lambda: health(service)["in_flight"] == 1,
        timeout=60,
        every=0.05,
        why="the call being decided",
    )


def health(service) -> dict:
    url = f"http://127.0.0.1:{service.http_port}/healthz"
    with urllib.request.urlopen(url, timeout=30) as response:
        return json.loads(response.read())


def test_rls__redis_held__answered_by_half_the_deadline_with_each_route_failure_mode(
    start, private_redis
):
    # Given the service, whose Redis calls would wait 30 s
    service = start(redis_timeout=30)
    # When Envoy asks with its deadline (here 4 s) while Redis says nothing
    with rls_of(service) as stub, redis_held(private_redis.url):
        began = time.monotonic()
        opened = stub.ShouldRateLimit(request("acme", SEARCH), timeout=4)
        closed = stub.ShouldRateLimit(request("globex", ORDER), timeout=4)
        took = time.monotonic() - began
    # Then both were answered before Envoy's deadline (no DEADLINE_EXCEEDED was
    # raised), the open route admitted and the closed one refused with a 503
    assert opened.overall_code == Response.OK
    assert closed.overall_code == Response.OVER_LIMIT
    assert dict(closed.dynamic_metadata)["status"] == 503
    assert took < 8  # two calls of 4 s at most, not the 30 s Redis timeout
    # and both decisions are in the stream as the service's own
    events = outcomes_in_stream(private_redis.url, expected=2)
    assert events[("acme", "fail_open")] == 1
    assert events[("globex", "fail_closed")] == 1


def test_rls__envoy_gives_up_on_a_call__recorded_as_the_gateway_s_no_traceback(
    start, private_redis
):
    # Given the service, its Redis calls waiting 30 s, and a caller with a
    # deadline of a minute
    service = start(redis_timeout=30)
    with rls_of(service) as stub, redis_held(private_redis.url):
        # When the caller gives up on a call while Redis holds it (as Envoy
        # does when its timer fires)
        call = stub.ShouldRateLimit.future(request("initech", SEARCH), timeout=60)
        wait_deciding(service)
        call.cancel()
        wait_until(
            lambda: health(service)["gateway_timeouts"] == 1,
            timeout=60,
            every=0.05,
            why="the service counted the call the caller gave up on",
        )
    # Then the stream says the gateway decided that request, not Sluice
    events = outcomes_in_stream(private_redis.url, expected=1)
    assert events == Counter({("initech", "gateway_timeout"): 1})
    # and the service logged no traceback for it
    assert "Traceback" not in service.output()


def test_http__redis_held__answered_within_the_budget_by_each_route_failure_mode(
    start, private_redis
):
    # Given the service with a forward-auth budget of 0.5 s
    service = start(redis_timeout=30, budget=0.5)
    # When nginx asks while Redis says nothing
    with redis_held(private_redis.url):
        opened = forward_auth(service, "acme", SEARCH)
        closed = forward_auth(service, "globex", ORDER)
    # Then the open route is admitted and the closed one refused with its 503
    assert opened[0] == 200
    assert closed[0] == 503
    assert closed[1]["content-type"] == "application/problem+json"
    events = outcomes_in_stream(private_redis.url, expected=2)
    assert events[("acme", "fail_open")] == 1
    assert events[("globex", "fail_closed")] == 1


def forward_auth(
    service, tenant: str, entries: dict[str, str], forwarded_for: str | None = None
):
    headers = {
        "X-Tenant": tenant,
        "X-Forwarded-Method": entries["method"],
        "X-Forwarded-Uri": entries["path"],
    }
    if forwarded_for is not None:
        headers["X-Forwarded-For"] = forwarded_for
    asked = urllib.request.Request(
        f"http://127.0.0.1:{service.http_port}/v1/decide", headers=headers
    )
    try:
        with urllib.request.urlopen(asked, timeout=60) as response:
            return response.status, {k.lower(): v for k, v in response.headers.items()}
    except urllib.error.HTTPError as error:
        return error.code, {k.lower(): v for k, v in error.headers.items()}


def test_http__gateway_closes_before_the_answer__recorded_as_the_gateway_s(
    start, private_redis
):
    # Given the service, its Redis calls and its budget far longer than the test
    service = start(redis_timeout=30, budget=30)
    # When a gateway asks, then closes the connection (its own timeout fired)
    # while Redis holds the call
    with (
        redis_held(private_redis.url),
        socket.create_connection(("127.0.0.1", service.http_port)) as sock,
    ):
        sock.sendall(
            b"GET /v1/decide HTTP/1.1\r\nHost: sluice\r\nX-Tenant: umbrella\r\n"
            b"X-Forwarded-Method: GET\r\nX-Forwarded-Uri: /v1/search\r\n\r\n"
        )
        wait_deciding(service)
    # Then, once Redis answers, the request is recorded as the gateway's decision
    wait_until(
        lambda: health(service)["gateway_timeouts"] == 1,
        timeout=60,
        every=0.05,
        why="the service counted the closed connection",
    )
    events = outcomes_in_stream(private_redis.url, expected=1)
    assert events == Counter({("umbrella", "gateway_timeout"): 1})


def test_workers__two_share_the_ports_one_limit_and_a_dead_one_comes_back(
    start, private_redis
):
    # Given the service with two workers
    service = start(workers=2)
    # When callers connect anew for each request
    workers = wait_until(
        lambda: answering(service) if len(answering(service)) == 2 else None,
        timeout=60,
        why="both workers answering",
    )
    # Then both answer, on the same ports, and enforce one limit: 3 an hour
    statuses = [forward_auth(service, "acme", SEARCH)[0] for _ in range(6)]
    assert statuses == [200, 200, 200, 429, 429, 429]
    # and a worker that dies is replaced, the other answering meanwhile
    dead = sorted(workers)[0]
    os.kill(dead, signal.SIGKILL)
    wait_until(
        lambda: len(answering(service) - {dead}) == 2,
        timeout=60,
        why="a new worker beside the survivor",
    )
    assert forward_auth(service, "acme", SEARCH)[0] == 429


def answering(service) -> set[int]:
    """The workers that answered 40 health checks, each on a new connection (a
    connection the kernel queued for a worker that died is reset: not counted)."""
    workers = set()
    for _ in range(40):
        with suppress(ConnectionError):
            workers.add(health(service)["worker"])
    return workers


def test_access_log__envoy_decided_requests__recorded_once_each_as_the_gateway_s(
    start, private_redis
):
    # Given the service told that Envoy logs what it decides itself
    service = start(redis_timeout=30, extra=("--gateway-logs",))
    with rls_of(service) as stub, redis_held(private_redis.url):
        # When Envoy gives up on a call while Redis holds it (the service does
        # not record it: the log will)...
        call = stub.ShouldRateLimit.future(request("initech", SEARCH), timeout=60)
        wait_deciding(service)
        call.cancel()
        wait_until(  # grpc cancels the handler a moment later, Redis still held
            lambda: health(service)["in_flight"] == 0,
            timeout=60,
            every=0.05,
            why="the service to see the call cancelled",
        )
        # ...and its access log then says it decided that request and another
        # one, which the service never saw
        logged = [
            log_entry("initech", "GET", "/v1/search"),
            log_entry("umbrella", "POST", "/v1/orders"),
        ]
        channel = grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}")
        try:
            als_pb2_grpc.AccessLogServiceStub(channel).StreamAccessLogs(
                iter(
                    [als_pb2.StreamAccessLogsMessage(http_logs={"log_entry": logged})]
                ),
                timeout=60,
            )
        finally:
            channel.close()
    # Then each of the two is in the stream once, as the gateway's decision,
    # with its tenant and route
    events = outcomes_in_stream(private_redis.url, expected=2)
    assert events == Counter(
        {("initech", "gateway_timeout"): 1, ("umbrella", "gateway_timeout"): 1}
    )
    routes = routes_in_stream(private_redis.url)
    assert routes == {"search", "orders.create"}


def log_entry(tenant: str, method: str, path: str):
    """Envoy's access log entry of a request (as envoy.yaml's access_log sends it)."""
    return accesslog_pb2.HTTPAccessLogEntry(
        common_properties={
            "downstream_remote_address": {"socket_address": {"address": "203.0.113.9"}}
        },
        request={
            "request_method": base_pb2.RequestMethod.Value(method),
            "path": path,
            "request_headers": {"x-tenant": tenant},
        },
        response={"response_code": {"value": 200}},
    )


def routes_in_stream(url) -> set[str]:
    return {
        record[2]
        for _, fields in redis.Redis.from_url(url).xrange(STREAM_KEY)
        for record in json.loads(fields[b"events"])
    }


def test_http__no_trusted_proxy__x_forwarded_for_is_not_believed(start, private_redis):
    # Given the service trusting no proxy, and a per-address limit of 3 an hour
    per_ip = snapshot(
        rules(policy("default", "*", limit("ip", 3, 3600, 3)), routes=ROUTES)
    )
    service = start(served=per_ip, trusted_proxy=None)
    # When one peer asks twice, claiming two client addresses
    claims = ("203.0.113.1", "203.0.113.2")
    answers = [
        forward_auth(service, "acme", SEARCH, forwarded_for=claim) for claim in claims
    ]
    # Then both count against the peer's own bucket: 2 left, then 1
    remaining = [a[1]["ratelimit"].split(";")[1] for a in answers]
    assert remaining == ["r=2", "r=1"]
