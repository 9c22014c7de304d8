"""nginx with Sluice's Lua module: how it gets its rules (``docs/gateway-protocol.md``).

It polls the control plane from a timer with the gateway token and its ETag,
reports its id and the version it runs, refuses a bundle it cannot compile
(and says so on the next poll), keeps the last good rules on disk for a
restart while the control plane is down, and with nothing at all applies the
strict built-in rules: never unlimited. A scheduled version takes over at its
time. (Redis failing: ``test_nginx_module_redis.py``; rules it must not trust:
``test_nginx_module_trust.py``.) (What it decides is held to the Python
model by the conformance corpus: ``tests/conformance/test_nginx_module.py``.)
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from sluice import Bundle, Dimension, Limiter, Snapshot, rate_limit_headers
from sluice.model import Calendar, CalendarQuota, SlidingWindow
from tests.celery_fixtures import wait_until
from tests.conformance import corpus
from tests.gateways import servers
from tests.gateways.conftest import (
    call,
    port_of,
    wait_applied,
)
from tests.servers import free_port


def test_nginx_module__polls__token_etag_304_and_the_fleet_report(
    start_nginx, rules_server
):
    # Given nginx with the module polling the control plane
    start_nginx(port_of(rules_server), name="ngx-poll")
    # When it has polled a few times
    wait_until(
        lambda: (
            len([r for r in list(rules_server.requests) if "If-None-Match" in r]) >= 2
        ),
        timeout=60,
        every=0.05,
        why="two conditional polls",
    )
    # Then it sent its token and id, and once it had the bundle, its ETag and version
    first, *later = list(rules_server.requests)
    assert first["Authorization"] == "Bearer gw_test_token"
    assert first["Sluice-Gateway-Id"] == "ngx-poll"
    assert "If-None-Match" not in first
    conditional = [r for r in later if "If-None-Match" in r]
    assert {r["If-None-Match"] for r in conditional} == {rules_server.etag}
    assert {r["Sluice-Applied-Version"] for r in conditional} == {str(corpus.VERSION)}
    # and the scheduled version it rehearses
    assert {r["Sluice-Rehearsed-Version"] for r in conditional} == {
        str(corpus.SCHEDULED_VERSION)
    }


def test_nginx_module__restarted_with_the_control_plane_down__enforces_the_last_good_rules(
    start_nginx, rules_server
):
    # Given nginx that applied the corpus' rules, then stopped
    _, first = start_nginx(port_of(rules_server))
    wait_applied(rules_server)
    first.stop()
    # When it starts again while the control plane does not answer
    port, _ = start_nginx(free_port())
    answer = call(port, "/v1/search", tenant="free-a")
    # Then it decides with the rules it had: tier free's daily search limit
    assert answer.status == 200
    assert answer.headers["ratelimit-policy"] == '"tenant-day";q=2;w=28800'


def test_nginx_module__no_rules_at_all__the_strict_built_in_ones(start_nginx):
    # Given nginx whose control plane never answered, and no last good rules
    port, _ = start_nginx(free_port())
    # When a request comes
    answer = call(port, "/v1/search", tenant="free-a")
    # Then it is limited by the built-in rules (per IP, 10/s, burst 20), not unlimited
    assert answer.status == 200
    assert answer.headers["ratelimit-policy"] == '"ip-s";q=20;w=2'
    assert answer.headers["ratelimit"] == '"ip-s";r=19;t=1'


def test_make_run_nginx__rendered_for_this_machine__decides(
    redis_server, redis_client, backend, cache_dir, rules_server, tmp_path
):
    # Given the demo token in a file, and make run's nginx (python -m gateway.nginx)
    # pointed at a control plane, a Redis and a port of this test's
    token_file = tmp_path / "token"
    token_file.write_text(rules_server.token + "\n")
    port = free_port()
    env = {
        **os.environ,
        "SLUICE_CONTROL_PLANE_URL": rules_server.url.removesuffix("/api/v1/snapshot"),
        "SLUICE_REDIS_URL": redis_server.url,
        "SLUICE_GATEWAY_TOKEN_FILE": str(token_file),
        "SLUICE_GATEWAY_ID": "nginx-demo-test",
        "SLUICE_NGINX_PORT": str(port),
        "SLUICE_NGINX_PREFIX": str(cache_dir),
        "SLUICE_REDIS_TIMEOUT": "5",
        "SLUICE_BACKENDS_PORT": str(backend.port),
    }
    process = servers.Process(
        [sys.executable, "-m", "gateway.nginx"], port, env=env, cwd=servers.ROOT
    )
    process.start()
    try:
        wait_applied(rules_server)
        # When a request comes: Then it is decided with the control plane's rules
        answer = call(port, "/v1/search", tenant="free-a")
        assert answer.status == 200
        assert answer.json()["path"] == "/v1/search"  # the backend's echo
        assert answer.headers["ratelimit-policy"] == '"tenant-day";q=2;w=28800'
        assert redis_client.exists(
            "rl:{tenant:free-a}:route:search:tenant:free-a:86400s"
        )
    finally:
        process.stop()


def test_nginx_module__scheduled_version__takes_over_at_its_time(
    start_nginx, rules_server
):
    # Given a bundle whose next version, due in 3 s, raises tier free's search burst to 5
    active = corpus.snapshot()
    raised = tuple(
        replace(p, limits=(replace(p.limits[0], burst=5),))
        if (p.scope, p.route) == ("tier:free", "search")
        else p
        for p in active.rules.policies
    )
    due = datetime.now(UTC) + timedelta(seconds=3)
    scheduled = Snapshot.build(
        version=corpus.VERSION + 1,
        parent=corpus.VERSION,
        published_at=corpus.PUBLISHED,
        effective_at=due,
        rules=replace(active.rules, policies=raised),
    )
    rules_server.serve(Bundle(active, (scheduled,)))
    port, _ = start_nginx(port_of(rules_server))
    wait_applied(rules_server)
    # When a tier free tenant searches before and after its time
    before = call(port, "/v1/search", tenant="free-a")
    wait_until(
        lambda: datetime.now(UTC) > due, timeout=60, every=0.05, why="the switch"
    )
    after = call(port, "/v1/search", tenant="free-b")
    # Then the first is decided by the active version (burst 2), the second by the
    # scheduled one (burst 5), without a poll in between being needed
    assert before.headers["ratelimit-policy"] == '"tenant-day";q=2;w=28800'
    assert after.headers["ratelimit-policy"] == '"tenant-day";q=5;w=72000'


def test_nginx_module__github_headers_and_jitter__when_asked(
    backend, tmp_path, cache_dir, rules_server, redis_server, redis_client
):
    # Given nginx asked for X-RateLimit-* and up to 30 s of Retry-After jitter
    port = free_port()
    process = servers.nginx_module(
        tmp_path,
        port=port,
        backend=backend.port,
        control_plane=port_of(rules_server),
        redis=redis_server.port,
        token=rules_server.token,
        cache=cache_dir,
        options="github_headers = true, retry_jitter = 30,",
    ).start()
    try:
        wait_applied(rules_server)
        # When a tier free tenant searches three times (burst 2, one per 4 h)
        began = time.time()
        answers = [call(port, "/v1/search", tenant="free-b") for _ in range(3)]
    finally:
        process.stop()
    # Then the admitted answers carry the deciding limit the GitHub way, reset on
    # Redis's clock (this machine's), and the 429 waits the limit's time plus jitter
    first = answers[0].headers
    assert (first["x-ratelimit-limit"], first["x-ratelimit-remaining"]) == ("2", "1")
    assert began + 14400 <= int(first["x-ratelimit-reset"]) <= time.time() + 14401
    assert answers[2].status == 429
    assert 14400 - 5 <= int(answers[2].headers["retry-after"]) <= 14400 + 30


def test_nginx_module__sliding_window__decides_as_the_python_client(
    start_nginx, rules_server, redis_client
):
    # Given tier free's searches limited to 3 in any minute per account (a sliding
    # window), served to nginx and to the Python client
    active = corpus.snapshot()
    window = SlidingWindow(Dimension.TENANT, 3, 60)
    windowed = tuple(
        replace(p, limits=(window,))
        if (p.scope, p.route) == ("tier:free", "search")
        else p
        for p in active.rules.policies
    )
    snapshot = Snapshot.build(
        version=corpus.VERSION,
        parent=None,
        published_at=corpus.PUBLISHED,
        effective_at=corpus.PUBLISHED,
        rules=replace(active.rules, policies=windowed),
    )
    rules_server.serve(Bundle(snapshot))
    port, _ = start_nginx(port_of(rules_server))
    wait_applied(rules_server)
    # When one free tenant searches 4 times through nginx, another 4 times through
    # the client (the same Redis)
    answers = [call(port, "/v1/search", tenant="free-a") for _ in range(4)]
    limiter = Limiter(redis_client, snapshot)
    decisions = [limiter.decide(route="search", tenant="free-b") for _ in range(4)]
    # Then both admit 3 and reject the 4th, with the same policy and remaining
    assert [a.status for a in answers] == [200, 200, 200, 429]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    headers = dict(rate_limit_headers(decisions[1]))
    assert answers[1].headers["ratelimit-policy"] == headers["RateLimit-Policy"]
    assert answers[1].headers["ratelimit"] == headers["RateLimit"]
    assert answers[3].headers["ratelimit-policy"] == '"tenant-min-sliding";q=3;w=60'
    assert 0 < int(answers[3].headers["retry-after"]) <= 120
    # And nginx counted in the window's hash, as the script's sliding branch does
    keys = redis_client.keys("*free-a*sliding_window")
    assert len(keys) == 1
    assert list(redis_client.hgetall(keys[0]).values()) == [b"3"]


def _seconds(header: str, name: str) -> int:
    """The ``t`` of item ``name`` in a RateLimit header."""
    item = next(i for i in header.split(", ") if i.startswith(f'"{name}"'))
    return int(item.rpartition("t=")[2])


def test_nginx_module__calendar_quota__periods_and_waits_as_the_python_client(
    start_nginx, rules_server, redis_client
):
    # Given tier free's searches limited to 3 a billing month per account, for
    # two tenants billed on the 29th in Paris (Lua's POSIX rule and period bounds)
    active = corpus.snapshot()
    quota = CalendarQuota(Dimension.TENANT, 3, "month", cycle="billing")
    limited = tuple(
        replace(p, limits=(quota,))
        if (p.scope, p.route) == ("tier:free", "search")
        else p
        for p in active.rules.policies
    )
    paris = Calendar("Europe/Paris", 29)
    rules = replace(
        active.rules,
        policies=limited,
        calendars={"free-a": paris, "free-b": paris},
        zones={"Europe/Paris": "CET-1CEST,M3.5.0,M10.5.0/3"},
    )
    snapshot = Snapshot.build(
        version=corpus.VERSION,
        parent=None,
        published_at=corpus.PUBLISHED,
        effective_at=corpus.PUBLISHED,
        rules=rules,
    )
    rules_server.serve(Bundle(snapshot))
    port, _ = start_nginx(port_of(rules_server))
    wait_applied(rules_server)
    # When one tenant searches 4 times through nginx, the other through the client
    answers = [call(port, "/v1/search", tenant="free-a") for _ in range(4)]
    limiter = Limiter(redis_client, snapshot)
    decisions = [limiter.decide(route="search", tenant="free-b") for _ in range(4)]
    # Then both admit 3 and reject the 4th until the same billing date
    assert [a.status for a in answers] == [200, 200, 200, 429]
    assert [d.allowed for d in decisions] == [True, True, True, False]
    headers = dict(rate_limit_headers(decisions[1]))
    assert answers[1].headers["ratelimit-policy"] == headers["RateLimit-Policy"]
    name = "tenant-month-quota"
    ours = _seconds(headers["RateLimit"], name)
    assert abs(_seconds(answers[1].headers["ratelimit"], name) - ours) <= 30
    assert answers[1].headers["ratelimit"].startswith(f'"{name}";r=1;')
    assert abs(int(answers[3].headers["retry-after"]) - decisions[3].retry_after) <= 30
    # And nginx counted in the key the client uses, a hash of the period's start
    key = decisions[3].deciding.key.replace("free-b", "free-a")
    assert redis_client.hget(key, "n") == b"3"
    assert redis_client.hget(key, "p") == redis_client.hget(
        decisions[3].deciding.key, "p"
    )
