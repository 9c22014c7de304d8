"""nginx with Sluice's Lua module: how it gets its rules (``docs/gateway-protocol.md``).

It polls the control plane from a timer with the gateway token and its ETag,
reports its id and the version it runs, refuses a bundle it cannot compile
(and says so on the next poll), keeps the last good rules on disk for a
restart while the control plane is down, and with nothing at all applies the
strict built-in rules: never unlimited. A scheduled version takes over at its
time; a stalled Redis costs the timeout, then the route's failure mode; what
the open mode admitted is charged once Redis is back. (What it decides is held to the Python
model by the conformance corpus: ``tests/conformance/test_nginx_module.py``.)
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import signal
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sluice import Bundle, Dimension, KeyRing, Limiter, Snapshot, rate_limit_headers
from sluice.model import SlidingWindow
from sluice.signing import sign
from tests.celery_fixtures import wait_until
from tests.client.protocol_server import ProtocolServer
from tests.conformance import corpus
from tests.gateways import servers
from tests.gateways.conftest import Answer, call
from tests.servers import RedisServer, free_port
from tests.signing import TEST_SIGNING_KEY, keys_file

#: How long CLIENT PAUSE holds Redis's clients: well past the requests sent meanwhile.
PAUSE_MS = 10_000


@pytest.fixture
def cache_dir():
    folder = Path(tempfile.mkdtemp(prefix="sluice-nginx-"))
    folder.chmod(0o777)  # nginx's workers run as nobody
    yield folder
    shutil.rmtree(folder)


@pytest.fixture
def nginx_on_own_redis(backend, tmp_path, cache_dir, rules_server):
    """nginx with a 200 ms Redis timeout on a Redis of its own, which the test may
    stop, pause or kill: (nginx's port, the Redis server)."""
    store = RedisServer().start()
    port = free_port()
    process = servers.nginx_module(
        tmp_path,
        port=port,
        backend=backend.port,
        control_plane=port_of(rules_server),
        redis=store.port,
        token=rules_server.token,
        cache=cache_dir,
        redis_timeout_ms=200,
    ).start()
    yield port, store
    process.stop()
    store.cleanup()


@pytest.fixture
def start_nginx(redis_server, redis_client, backend, tmp_path, cache_dir):
    """``start_nginx(control_plane_port, token)``: nginx with the module; stopped after."""
    started = []

    def start(
        control_plane: int,
        token: str = "gw_test_token",
        name: str = "ngx-a",
        public_keys: Path | None = None,
    ):
        port = free_port()
        process = servers.nginx_module(
            tmp_path,
            port=port,
            backend=backend.port,
            control_plane=control_plane,
            redis=redis_server.port,
            token=token,
            gateway_id=name,
            cache=cache_dir,
            public_keys=public_keys,
        )
        started.append(process.start())
        return port, process

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def rules_server():
    server = ProtocolServer().start()
    server.serve(corpus.bundle())
    yield server
    server.stop()


def port_of(server: ProtocolServer) -> int:
    return int(server.url.split(":")[2].split("/")[0])


def reported(server: ProtocolServer, header: str, value: str) -> bool:
    return any(r.get(header) == value for r in list(server.requests))


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


def test_nginx_module__bad_bundle__refused_reported_and_the_rules_in_force_stay(
    start_nginx, rules_server
):
    # Given nginx that applied the corpus' rules
    port, _ = start_nginx(port_of(rules_server))
    wait_applied(rules_server)
    # When the control plane serves a bundle without the default policy
    broken = corpus.bundle().to_json()
    broken["active"]["version"] = corpus.VERSION + 1
    broken["active"]["rules"]["policies"] = broken["active"]["rules"]["policies"][1:]
    rules_server.serve_bytes(json.dumps(broken).encode())
    # Then it says so on its next poll
    wait_until(
        lambda: reported(
            rules_server, "Sluice-Rejected-Version", str(corpus.VERSION + 1)
        ),
        timeout=60,
        every=0.05,
        why="the refusal to be reported",
    )
    # and keeps deciding with the rules it had
    answer = call(port, "/v1/search", tenant="free-a")
    assert answer.headers["ratelimit-policy"] == '"tenant-day";q=2;w=28800'


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
        wait_until(
            lambda: reported(
                rules_server, "Sluice-Applied-Version", str(corpus.VERSION)
            ),
            timeout=60,
            every=0.05,
            why="the rules to be applied",
        )
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
        wait_until(
            lambda: reported(
                rules_server, "Sluice-Applied-Version", str(corpus.VERSION)
            ),
            timeout=60,
            every=0.05,
            why="the rules to be applied",
        )
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


_PROBES = itertools.count()


def decided_by_redis(port: int, tenant: str) -> bool:
    """Whether a search through nginx on ``port`` was decided on Redis: a tenant of
    its own per probe (``tenant`` and a number), since a call that timed out may
    still run on Redis later (the documented overshoot) and spend a probe tenant's
    small budget, which a 429 from a spent budget would hide."""
    answer = call(port, "/v1/search", tenant=f"{tenant}{next(_PROBES)}")
    return answer.status == 200 and "sluice-degraded" not in answer.headers


def all_at_once(port: int, requests: list[tuple[str, str]]) -> list[Answer]:
    """``(path, tenant)`` requests sent together, each on its own connection."""
    with ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(lambda r: call(port, r[0], tenant=r[1]), requests))


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
    wait_until(
        lambda: reported(rules_server, "Sluice-Applied-Version", str(corpus.VERSION)),
        timeout=60,
        every=0.05,
        why="the bundle to be applied",
    )
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


def test_nginx_module__altered_bundle__refused_by_its_hash(start_nginx, rules_server):
    # Given nginx that applied rules whose names need escaping in canonical JSON
    active = corpus.snapshot()
    odd = Snapshot.build(
        version=corpus.VERSION + 1,
        parent=corpus.VERSION,
        published_at=corpus.PUBLISHED,
        effective_at=corpus.PUBLISHED,
        rules=replace(
            active.rules,
            tiers={**active.rules.tiers, "free": 'Frëe "tier"\\\n\t\x01 ü ✓'},
        ),
    )
    rules_server.serve(Bundle(odd))
    port, _ = start_nginx(port_of(rules_server))
    wait_until(
        lambda: reported(rules_server, "Sluice-Applied-Version", str(odd.version)),
        timeout=60,
        every=0.05,
        why="the rules to be applied (their hash verified)",
    )
    # When the next bundle's content was altered after it was hashed
    altered = Bundle(odd).to_json()
    altered["active"]["version"] = odd.version + 1
    rules_server.serve_bytes(json.dumps(altered).encode())
    # Then it is refused and reported, and the rules in force stay
    wait_until(
        lambda: reported(rules_server, "Sluice-Rejected-Version", str(odd.version + 1)),
        timeout=60,
        every=0.05,
        why="the refusal to be reported",
    )
    reason = next(
        r["Sluice-Rejected-Reason"]
        for r in list(rules_server.requests)
        if "Sluice-Rejected-Reason" in r
    )
    assert "hash" in reason
    answer = call(port, "/v1/search", tenant="free-a")
    assert answer.headers["ratelimit-policy"] == '"tenant-day";q=2;w=28800'


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
        wait_until(
            lambda: reported(
                rules_server, "Sluice-Applied-Version", str(corpus.VERSION)
            ),
            timeout=60,
            every=0.05,
            why="the rules to be applied",
        )
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


def wait_applied(rules_server) -> None:
    """Until nginx reports, in its polls, that it applied the corpus' rules."""
    wait_until(
        lambda: reported(rules_server, "Sluice-Applied-Version", str(corpus.VERSION)),
        timeout=60,
        every=0.05,
        why="the rules to be applied",
    )


def _free_search_burst(active: Snapshot, burst: int) -> tuple:
    return tuple(
        replace(p, limits=(replace(p.limits[0], burst=burst),))
        if (p.scope, p.route) == ("tier:free", "search")
        else p
        for p in active.rules.policies
    )


@pytest.mark.parametrize("skew", [3600, -3600], ids=["an_hour_ahead", "an_hour_behind"])
def test_nginx_module__clock_an_hour_off__versions_judged_by_redis_time(
    redis_server, redis_client, backend, tmp_path, cache_dir, rules_server, skew
):
    # Given version N+1 (tier free's search burst 5) in effect for half an hour on
    # Redis's clock and version N+2 (burst 7) due in half an hour
    now = redis_client.time()[0]
    active = corpus.snapshot()

    def version(offset: int, burst: int, at: int) -> Snapshot:
        return Snapshot.build(
            version=corpus.VERSION + offset,
            parent=corpus.VERSION + offset - 1,
            published_at=corpus.PUBLISHED,
            effective_at=datetime.fromtimestamp(at, UTC),
            rules=replace(active.rules, policies=_free_search_burst(active, burst)),
        )

    rules_server.serve(
        Bundle(active, (version(1, 5, now - 1800), version(2, 7, now + 1800)))
    )
    # and nginx whose own clock is an hour off (the module's clock_offset seam)
    port = free_port()
    process = servers.nginx_module(
        tmp_path,
        port=port,
        backend=backend.port,
        control_plane=port_of(rules_server),
        redis=redis_server.port,
        token=rules_server.token,
        gateway_id="ngx-skewed",
        cache=cache_dir,
        options=f"clock_offset = {skew},",
    ).start()
    try:
        wait_applied(rules_server)
        # When a tier free tenant searches
        answer = call(port, "/v1/search", tenant="free-a")
    finally:
        process.stop()
    # Then version N+1 decided it, as on any gateway whatever its clock
    assert answer.headers["ratelimit-policy"] == '"tenant-day";q=5;w=72000'


def _forge_cache(cache_dir: Path) -> None:
    """Edit the cached rules (only the default policies left) and recompute every
    hash, as someone with write access to the gateway's disk would; the
    signature line stays as it was."""
    path = cache_dir / "sluice-rules.json"
    head, _, _body = path.read_bytes().partition(b"\n")
    active = corpus.snapshot()
    lax = replace(
        active.rules,
        policies=tuple(p for p in active.rules.policies if p.scope == "default"),
    )
    forged = Snapshot.build(
        version=active.version,
        parent=active.parent,
        published_at=active.published_at,
        effective_at=active.effective_at,
        rules=lax,
    )
    body = b'{"active":' + forged.to_bytes() + b',"scheduled":[]}'
    path.write_bytes(head + b"\n" + body)


def test_nginx_module__cache_edited_and_rehashed__refused_at_restart(
    start_nginx, rules_server, cache_dir
):
    # Given nginx that applied the corpus' rules and wrote them to its cache, then stopped
    _, first = start_nginx(port_of(rules_server))
    wait_applied(rules_server)
    first.stop()
    # When the cached rules are edited, hashes recomputed, and nginx starts again
    # while the control plane does not answer
    _forge_cache(cache_dir)
    port, restarted = start_nginx(free_port())
    answer = call(port, "/v1/search", tenant="free-a")
    # Then the file is refused with one line naming the signature, and the strict
    # built-in rules apply: neither the edited rules nor unlimited
    assert answer.headers["ratelimit-policy"] == '"ip-s";q=20;w=2'
    refusals = [
        line
        for line in restarted.log.read_text(errors="replace").splitlines()
        if "snapshot.cache_ignored" in line
    ]
    assert refusals
    assert all("does not match the bundle" in line for line in refusals)


def _following() -> bytes:
    """The bytes of a valid bundle of a later version (the corpus' rules)."""
    active = corpus.snapshot()
    later = Snapshot.build(
        version=corpus.VERSION + 10,
        parent=corpus.VERSION,
        published_at=active.published_at,
        effective_at=active.effective_at,
        rules=active.rules,
    )
    return b'{"active":' + later.to_bytes() + b',"scheduled":[]}'


def _other_key_signature(body: bytes) -> str:
    return sign(Ed25519PrivateKey.generate(), body)


@pytest.mark.parametrize(
    ("signer", "says"),
    [(lambda body: None, "not signed"), (_other_key_signature, "unknown key")],
    ids=["unsigned", "unknown-key"],
)
def test_nginx_module__unsigned_or_unknown_key__refused_reported_rules_stay(
    start_nginx, rules_server, signer, says
):
    # Given nginx that applied the corpus' rules
    port, process = start_nginx(port_of(rules_server))
    wait_applied(rules_server)
    # When the control plane serves a next version unsigned, or signed by another key
    body = _following()
    rules_server.serve_bytes(body, signature=signer(body))
    # Then it is refused, reported with the reason, and the rules in force stay
    wait_until(
        lambda: reported(
            rules_server, "Sluice-Rejected-Version", str(corpus.VERSION + 10)
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
    assert all(says in reason for reason in reasons)
    answer = call(port, "/v1/search", tenant="free-a")
    assert answer.headers["ratelimit-policy"] == '"tenant-day";q=2;w=28800'
    logged = process.log.read_text(errors="replace").count("snapshot.rejected")
    assert logged == 1  # one line, though every poll fetched it again


def test_nginx_module__rotation_overlap__old_and_new_keys_both_accepted(
    start_nginx, rules_server, tmp_path
):
    # Given nginx configured, for a rotation's overlap, with the old and the new key
    new_key = Ed25519PrivateKey.generate()
    both = keys_file(tmp_path, KeyRing([TEST_SIGNING_KEY, new_key]))
    start_nginx(port_of(rules_server), public_keys=both)
    # When the control plane signs with the old key, then with the new one
    wait_applied(rules_server)
    body = _following()
    rules_server.serve_bytes(body, signature=sign(new_key, body))
    # Then both are applied
    wait_until(
        lambda: reported(
            rules_server, "Sluice-Applied-Version", str(corpus.VERSION + 10)
        ),
        timeout=60,
        every=0.05,
        why="the bundle signed by the new key to be applied",
    )


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
