"""The decision service's two protocols, spoken by a real gRPC client and a real HTTP client.

``sluice-decide`` runs as a subprocess on a real Redis; the answers are
checked field by field, as a gateway reads them, and bad input gets the
documented default decision and a log line, never a broken connection.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import replace

import grpc
import pytest
from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

from sluice import STREAM_KEY, Bundle, Dimension, FailureMode, Route
from sluice.calendar import period_bounds
from sluice.model import Calendar, CalendarQuota, Rules, SlidingWindow
from tests.celery_fixtures import wait_until
from tests.client.factories import (
    PUBLISHED,
    ROUTES,
    concurrent,
    limit,
    policy,
    rules,
    snapshot,
)
from tests.client.protocol_server import ProtocolServer
from tests.gateways import servers

Response = rls_pb2.RateLimitResponse

RULES = snapshot(
    rules(
        policy("default", "search", limit("tenant", 6, 60, 3)),
        policy(
            "default",
            "orders.read",
            limit("tenant", 100, 1, 100),
            limit("user", 1, 3600, 2, shadow=True),
        ),
        policy(
            "default",
            "orders.create",
            limit("tenant", 100, 1, 100),
            concurrency=(concurrent("tenant", 1),),
        ),
        # search requests may declare a cost (Envoy's hits_addend) up to 3
        routes={**ROUTES, "search": replace(ROUTES["search"], max_cost=3)},
    )
)


@pytest.fixture
def serve(redis_server, redis_client, tmp_path):
    """Start ``sluice-decide`` polling a control plane that serves a given bundle;
    return the service and that control plane (both stopped after the test)."""
    started = []

    def start(bundle: Bundle):
        rules_server = ProtocolServer().start()
        rules_server.serve(bundle)
        service = servers.DecisionService(
            rules_server.url.removesuffix("/api/v1/snapshot"),
            rules_server.token,
            redis_server.url,
            tmp_path,
        )
        started.append((service, rules_server))
        service.start().wait_version(bundle.active.version)
        return service, rules_server

    yield start
    for service, rules_server in started:
        service.stop()
        rules_server.stop()


@pytest.fixture
def service(serve):
    return serve(Bundle(RULES))[0]


@pytest.fixture
def rls(service):
    channel = grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}")
    yield rls_pb2_grpc.RateLimitServiceStub(channel)
    channel.close()


def descriptor(**entries: str):
    return ratelimit_pb2.RateLimitDescriptor(
        entries=[
            ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v)
            for k, v in entries.items()
        ]
    )


def ask(rls, *descriptors, hits_addend: int = 0):
    request = rls_pb2.RateLimitRequest(
        domain="sluice", descriptors=descriptors, hits_addend=hits_addend
    )
    return rls.ShouldRateLimit(request, timeout=30)  # a deadline for hangs only


def headers(reply) -> dict[str, str]:
    return {h.key: h.value for h in reply.response_headers_to_add}


def search(**identity):
    return descriptor(method="GET", path="/v1/search?q=x", **identity)


def test_rls__burst_then_over__statuses_headers_and_body(rls):
    # Given a search limit of 6 / min, burst 3, per tenant
    # When Envoy asks four times for one tenant (route by :method and :path)
    replies = [
        ask(rls, search(remote_address="203.0.113.9"), descriptor(tenant="acme"))
        for _ in range(4)
    ]
    # Then three are OK and the fourth OVER_LIMIT
    assert [r.overall_code for r in replies] == [Response.OK] * 3 + [
        Response.OVER_LIMIT
    ]
    # and each descriptor's status names the limit in its closest unit
    first = replies[0].statuses[1]
    assert first.code == Response.OK
    assert first.current_limit.name == "tenant-min"
    assert first.current_limit.requests_per_unit == 6
    assert first.current_limit.unit == Response.RateLimit.MINUTE
    assert first.limit_remaining == 2
    assert first.duration_until_reset.ToMilliseconds() == 10_000
    assert headers(replies[0])["RateLimit"] == '"tenant-min";r=2;t=10'
    # and the refusal carries Retry-After, the content type and the problem+json body
    over = replies[3]
    assert over.statuses[1].code == Response.OVER_LIMIT
    assert over.statuses[1].limit_remaining == 0
    fields = headers(over)
    assert fields["Content-Type"] == "application/problem+json"
    assert fields["Retry-After"] == str(
        json.loads(over.raw_body)["retry_after_seconds"]
    )
    assert json.loads(over.raw_body)["violated-policies"] == ["tenant-min"]


def test_rls__hits_addend__is_the_cost(rls):
    # Given a tenant with a burst of 3 on search, which takes declared costs up to 3
    # When Envoy asks for a request of 3 hits, then for one more
    big = ask(rls, search(tenant="acme"), hits_addend=3)
    after = ask(rls, search(tenant="acme"))
    # Then the first takes the whole burst and the next is over the limit
    assert big.overall_code == Response.OK
    assert big.statuses[0].limit_remaining == 0
    assert after.overall_code == Response.OVER_LIMIT


def test_rls__shadow_limit_exceeded__never_over_limit(rls):
    # Given orders.read with a shadow per-user limit of burst 2
    order = descriptor(method="GET", path="/v1/orders/7", tenant="acme", user="u1")
    # When one user reads five orders
    replies = [ask(rls, order) for _ in range(5)]
    # Then all are OK: a shadow limit is reported, never enforced nor advertised
    assert {r.overall_code for r in replies} == {Response.OK}
    assert "user-h" not in headers(replies[-1])["RateLimit-Policy"]


def test_rls__route_by_slug__generic_key(rls):
    # Given a descriptor naming the route slug instead of method and path
    replies = [ask(rls, descriptor(route="search", tenant="acme")) for _ in range(4)]
    # Then the search limit applies as for /v1/search
    assert replies[-1].overall_code == Response.OVER_LIMIT
    assert replies[0].statuses[0].current_limit.name == "tenant-min"


def test_rls__no_method__the_path_names_its_one_route_and_a_shared_path_is_told(
    serve, redis_client
):
    # Given search alone on /v1/search, and orders.list (GET) and orders.create
    # (POST, cost 2) sharing /v1/orders, each with a limit of one such request
    listing = Route("orders.list", ("GET",), "/v1/orders", 1, FailureMode.OPEN)
    served = snapshot(
        rules(
            policy("default", "search", limit("tenant", 6, 60, 3)),
            policy("default", "orders.list", limit("tenant", 6, 60, 1)),
            policy("default", "orders.create", limit("tenant", 6, 60, 2)),
            routes={**ROUTES, "orders.list": listing},
        )
    )
    service, _ = serve(Bundle(served))
    channel = grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}")
    stub = rls_pb2_grpc.RateLimitServiceStub(channel)
    # When a gateway that sends :path but no :method asks four times for a
    # search, and three times for /v1/orders
    searches = [
        ask(stub, descriptor(path="/v1/search?q=x"), descriptor(tenant="acme"))
        for _ in range(4)
    ]
    orders = [
        ask(stub, descriptor(path="/v1/orders"), descriptor(tenant="acme"))
        for _ in range(3)
    ]
    channel.close()
    # Then the searches were decided by search's limit: its burst of 3, then over
    assert [r.overall_code for r in searches] == [Response.OK] * 3 + [
        Response.OVER_LIMIT
    ]
    assert searches[0].statuses[1].current_limit.name == "tenant-min"
    # and /v1/orders by neither orders route's limit: as matching no route
    # (the all-routes policy, 1000 / s per address)
    assert [r.overall_code for r in orders] == [Response.OK] * 3
    assert headers(orders[0])["RateLimit-Policy"] == '"ip-s";q=1000;w=1'
    # and the decision stream names the route of each
    routes = wait_until(
        lambda: _routes_in_stream(redis_client, expected=7),
        timeout=60,
        every=0.1,
        why="seven decisions in the stream",
    )
    assert routes == {"search": 4, "": 3}
    # and the log says once which descriptor entry is missing, for this gateway
    wait_logged(service, "service.missing_descriptor: method: 127.0.0.1 ")
    told = [
        line
        for line in service.output().splitlines()
        if "service.missing_descriptor" in line
    ]
    assert len(told) == 1
    assert "no 'method' entry" in told[0]
    assert "orders.create POST, orders.list GET" in told[0]


def _routes_in_stream(redis_client, *, expected: int) -> dict[str, int] | None:
    """Decisions per route in the stream, once it holds ``expected`` of them."""
    counts: dict[str, int] = {}
    for _, fields in redis_client.xrange(STREAM_KEY):
        for record in json.loads(fields[b"events"]):
            counts[record[2]] = counts.get(record[2], 0) + record[-1]
    return counts if sum(counts.values()) >= expected else None


@pytest.mark.parametrize(
    ("case", "descriptors", "logged"),
    [
        (
            "unknown keys",
            [search(tenant="acme", colour="blue")],
            "unknown_descriptor_key",
        ),
        ("no tenant", [search()], "missing_tenant"),
        ("oversized value", [search(tenant="x" * 100_000)], "oversized_value"),
        ("too many", [search(tenant="acme")] * 40, "oversized_request"),
    ],
)
def test_rls__bad_input__default_decision_and_a_log_line(
    rls, service, case, descriptors, logged
):
    # Given bad input from a gateway (case)
    # When it asks four times
    replies = [ask(rls, *descriptors) for _ in range(4)]
    # Then it gets decisions, the strict side: what is bad is dropped and the
    # rest decided (an unknown or dropped tenant shares the ~ tenant's bucket)
    assert [r.overall_code for r in replies] == [Response.OK] * 3 + [
        Response.OVER_LIMIT
    ]
    # and the service said so in its log
    wait_logged(service, f"service.bad_input: {logged}")


def test_rls__malformed_message__default_decision_a_log_line_and_the_connection_lives(
    rls, service
):
    # Given a client that sends bytes that are not a RateLimitRequest
    channel = grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}")
    raw = channel.unary_unary(
        "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        request_serializer=lambda b: b,
        response_deserializer=Response.FromString,
    )
    # When it calls the service
    reply = raw(b"\xff\xff\xff\xff garbage", timeout=30)
    # Then it gets the decision of an empty request (anonymous, no route: admitted
    # here by the all-routes policy) and the service logs why
    assert reply.overall_code == Response.OK
    wait_logged(service, "service.bad_input: malformed_request")
    assert "Traceback" not in service.output()
    # and the same channel decides the next request
    stub = rls_pb2_grpc.RateLimitServiceStub(channel)
    assert ask(stub, search(tenant="acme")).overall_code == Response.OK
    channel.close()


def decide(service, **headers):
    request = urllib.request.Request(
        f"http://127.0.0.1:{service.http_port}/v1/decide", headers=headers
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            status, raw, body = response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        status, raw, body = error.code, error.headers, error.read()
    return status, {k.lower(): v for k, v in raw.items()}, body


def test_http__nginx_asks_for_403__real_status_and_body_in_headers(service):
    # Given a tenant that used its burst of 3 searches
    ask = {"X-Original-Method": "GET", "X-Original-URI": "/v1/search?q=1"}
    for _ in range(3):
        assert decide(service, **ask, **{"X-Tenant": "acme"})[0] == 200
    # When nginx asks again, with Sluice-Reject-Status: 403
    status, fields, _ = decide(
        service, **ask, **{"X-Tenant": "acme", "Sluice-Reject-Status": "403"}
    )
    # Then the answer is a 403 naming the real 429 and carrying its body
    assert status == 403
    assert fields["sluice-status"] == "429"
    assert json.loads(fields["sluice-problem"])["error"] == "rate_limited"
    assert fields["retry-after"] == str(
        json.loads(fields["sluice-problem"])["retry_after_seconds"]
    )


def test_http__bad_cost_header__route_cost_and_a_log_line(service):
    # When a gateway sends a cost that is not a number
    status, _, _ = decide(
        service,
        **{"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/v1/search"},
        **{"X-Tenant": "acme", "Sluice-Cost": "lots"},
    )
    # Then the request is decided at the route's cost, and the log says why
    assert status == 200
    wait_logged(service, "service.bad_input: bad_cost")


def test_http__concurrency_slot__held_until_released(service):
    # Given orders.create with at most 1 request in flight per tenant
    ask = {"X-Forwarded-Method": "POST", "X-Forwarded-Uri": "/v1/orders"}
    first = decide(service, **ask, **{"X-Tenant": "acme"})
    # When a second request comes while the first holds its slot
    second = decide(service, **ask, **{"X-Tenant": "acme"})
    # and after the gateway releases the first
    request = urllib.request.Request(
        f"http://127.0.0.1:{service.http_port}/v1/release",
        method="POST",
        headers={"Sluice-Release": first[1]["sluice-release"]},
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        released = response.status
    third = decide(service, **ask, **{"X-Tenant": "acme"})
    # Then the second is refused for want of a slot and the third admitted
    assert first[0] == 200
    assert second[0] == 429
    assert json.loads(second[2])["error"] == "too_many_concurrent_requests"
    assert released == 204
    assert third[0] == 200


def test_http__healthz__the_version_in_force(service):
    with urllib.request.urlopen(
        f"http://127.0.0.1:{service.http_port}/healthz", timeout=30
    ) as response:
        health = json.loads(response.read())
    assert health["status"] == "ok"
    assert health["version"] == 1
    assert health["gateway_timeouts"] == 0


def test_http__version_scheduled__rehearsed_into_the_stream_and_fleet_report(
    serve, redis_client
):
    # Given sluice-decide polling a bundle where version 2, scheduled, lowers
    # search from burst 3 to burst 1 per tenant
    lowered = snapshot(
        rules(policy("default", "search", limit("tenant", 1, 60, 1)), routes=ROUTES),
        version=2,
        effective_at=PUBLISHED.replace(year=2100),
    )
    service, rules_server = serve(Bundle(RULES, (lowered,)))
    # When acme searches three times through forward-auth
    ask = {"X-Forwarded-Method": "GET", "X-Forwarded-Uri": "/v1/search"}
    answers = [decide(service, **ask, **{"X-Tenant": "acme"}) for _ in range(3)]
    # Then version 1 admitted all three, with its own headers, and the stream
    # says version 2 would have rejected two of them
    assert [status for status, _, _ in answers] == [200, 200, 200]
    assert answers[-1][1]["x-ratelimit-limit"] == "3"
    rehearsals = wait_for_rehearsals(redis_client)
    assert [r[1:] for r in rehearsals] == [["acme", "search", 2, 3, 2]]
    # and its polls say it rehearses version 2
    assert rules_server.requests[-1]["Sluice-Rehearsed-Version"] == "2"


def wait_for_rehearsals(redis_client) -> list[list]:
    """The rehearsal records in the decision stream, once the service flushed some."""
    return wait_until(
        lambda: [
            record
            for _, fields in redis_client.xrange(STREAM_KEY)
            for record in json.loads(fields.get(b"rehearsals", b"[]"))
        ],
        timeout=60,
        every=0.1,
        why="rehearsal records in the decision stream",
    )


def wait_logged(service, line: str) -> None:
    """Until the service's log has ``line`` (it writes it a moment after answering)."""
    wait_until(
        lambda: line in service.output(),
        timeout=60,
        every=0.05,
        why=f"{line!r} in the log of sluice-decide",
    )


def test_decision_service__unsigned_bundle__refused_reported_and_rules_kept(serve):
    # Given sluice-decide enforcing version 1 (SnapshotSource: the client's own path)
    service, rules_server = serve(Bundle(RULES))
    # When the control plane (or something in its place) serves version 2 unsigned
    v2 = Bundle(snapshot(RULES.rules, version=2))
    rules_server.serve_bytes(
        json.dumps(v2.to_json(), sort_keys=True).encode(), signature=None
    )
    # Then the service refuses it, says why on its next poll, and keeps version 1
    wait_until(
        lambda: any(
            r.get("Sluice-Rejected-Version") == "2" for r in list(rules_server.requests)
        ),
        timeout=60,
        every=0.05,
        why="the refusal to be reported",
    )
    reasons = {
        r["Sluice-Rejected-Reason"]
        for r in list(rules_server.requests)
        if "Sluice-Rejected-Reason" in r
    }
    assert reasons == {"signature: the bundle is not signed"}
    assert service.version() == 1
    assert service.output().count("snapshot.rejected") == 1


def test_rls__sliding_window__its_limit_in_the_closest_unit(serve):
    # Given searches limited to 2 in any minute per tenant (a sliding window)
    windowed = snapshot(
        rules(
            policy("default", "search", SlidingWindow(Dimension.TENANT, 2, 60)),
            routes=ROUTES,
        )
    )
    service, _ = serve(Bundle(windowed))
    channel = grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}")
    rls = rls_pb2_grpc.RateLimitServiceStub(channel)
    # When Envoy asks three times for one tenant
    replies = [
        ask(rls, search(remote_address="203.0.113.9"), descriptor(tenant="acme"))
        for _ in range(3)
    ]
    channel.close()
    # Then two are OK, the third OVER_LIMIT, and the status names the window
    assert [r.overall_code for r in replies] == [Response.OK] * 2 + [
        Response.OVER_LIMIT
    ]
    first = replies[0].statuses[1]
    assert first.current_limit.name == "tenant-min-sliding"
    assert first.current_limit.requests_per_unit == 2
    assert first.current_limit.unit == Response.RateLimit.MINUTE
    assert first.limit_remaining == 1
    assert headers(replies[0])["RateLimit"] == '"tenant-min-sliding";r=1;t=30'


def test_quota__grpc_and_http__the_period_end_in_headers_and_units(serve):
    # Given searches limited to 2 a day per tenant, acme's day in Paris, served
    # to the decision service
    plain = rules(
        policy("default", "search", CalendarQuota(Dimension.TENANT, 2, "day")),
        routes=ROUTES,
    )
    quota_rules = Rules(
        plain.tiers,
        plain.tenants,
        plain.routes,
        plain.policies,
        calendars={"acme": Calendar("Europe/Paris")},
        zones={"Europe/Paris": "CET-1CEST,M3.5.0,M10.5.0/3"},
    )
    service, _ = serve(Bundle(snapshot(quota_rules)))
    channel = grpc.insecure_channel(f"127.0.0.1:{service.grpc_port}")
    rls = rls_pb2_grpc.RateLimitServiceStub(channel)
    # When Envoy asks twice for acme, then nginx once over HTTP
    replies = [
        ask(rls, search(remote_address="203.0.113.9"), descriptor(tenant="acme"))
        for _ in range(2)
    ]
    channel.close()
    asked = {
        "X-Original-Method": "GET",
        "X-Original-URI": "/v1/search",
        "X-Tenant": "acme",
    }
    status, fields, body = decide(service, **asked)
    # Then Envoy reads a quota of 2 a DAY, reset at Paris's midnight
    midnight = period_bounds(
        int(time.time()), "day", "calendar", "CET-1CEST,M3.5.0,M10.5.0/3"
    )[1]
    first = replies[0].statuses[1]
    assert first.current_limit.name == "tenant-day-quota"
    assert first.current_limit.requests_per_unit == 2
    assert first.current_limit.unit == Response.RateLimit.DAY
    assert first.limit_remaining == 1
    assert abs(first.duration_until_reset.seconds - (midnight - time.time())) < 60
    policy_field = headers(replies[0])["RateLimit-Policy"]
    assert policy_field.startswith('"tenant-day-quota";q=2;w=')
    # And the third is a 429 whose Retry-After is the rest of acme's day
    assert status == 429
    assert abs(int(fields["retry-after"]) - (midnight - time.time())) < 60
    assert json.loads(body)["violated-policies"] == ["tenant-day-quota"]
