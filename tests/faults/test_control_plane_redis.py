"""The control plane's Redis paused (or stopped), then killed, under a fleet of polling gateways.

The control plane is gunicorn in a subprocess on the test database and a Redis
of this test's own (so it can be paused and killed); the gateways are real
``SnapshotSource`` pollers. Polls must keep being answered (304 or 200, never
an error): from the process's memory and Postgres while Redis does not answer,
and the reports made meanwhile must reach Redis once it is back.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from dataclasses import dataclass, field

import pytest
import redis

from limits.core.audit import Actor
from limits.gateways.keys import BUNDLE_KEY, COUNTERS_KEY, FLEET_KEY
from limits.gateways.tokens import token_create
from limits.gateways.window import poll_field
from limits.models import GatewayToken
from limits.publishing.services import snapshot_publish
from sluice.source import PollResult, SnapshotSource
from tests.celery_fixtures import database_url, wait_until
from tests.factories import TenantFactory
from tests.faults.traffic import median
from tests.servers import ControlPlaneServer, RedisServer
from tests.signing import TEST_KEYS

pytestmark = pytest.mark.django_db(transaction=True)

INTERVAL = 0.2  #: seconds between a gateway's polls
#: A gateway's poll timeout here: generous, so that "answered, not an error" is
#: not judged on this machine's speed. The poll path's own promise (Redis waited
#: for once, 0.25 s) is judged on how long the polls took.
POLL_TIMEOUT = 10.0
#: How long a test waits for what the control plane must do at all; no verdict
#: on this machine's speed.
PATIENCE = 60.0
#: The control plane's Redis timeout outside the poll path (``limits.core.store``).
ORDINARY_REDIS_TIMEOUT = 2.0
ANSWERED = 5  #: polls answered per gateway during the pause, at least
DEAD_ANSWERED = 20  #: polls answered per gateway while Redis is dead, at least


@pytest.fixture
def cp_redis():
    server = RedisServer().start()
    yield server
    server.cleanup()


def serve(cp_redis, settings, *, workers: int, token: str):
    """gunicorn on the test database and ``cp_redis``, version 1 published; its gateway token."""
    settings.REDIS_URL = cp_redis.url  # this process publishes into the same Redis
    snapshot_publish(actor=Actor.system(), message="v1")
    secret = token_create(token=GatewayToken(name=token), actor=Actor.system())
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": cp_redis.url,
        "DEBUG": "0",
        "SECRET_KEY": "tests-only",
        "LOG_LEVEL": "ERROR",
    }
    return ControlPlaneServer(env, workers=workers).start(), secret


@pytest.fixture
def control_plane(rules, cp_redis, settings):
    """gunicorn (2 workers) on the test database and its own Redis, version 1 published."""
    server, secret = serve(cp_redis, settings, workers=2, token="fleet")
    yield server, secret
    server.stop()


@dataclass
class Fleet:
    """Gateways that poll every ``INTERVAL`` in threads, every answer kept."""

    url: str
    secret: str
    cache_dir: object
    #: (sent, gateway, result, seconds it took)
    results: list[tuple[float, str, PollResult, float]] = field(default_factory=list)
    sources: dict[str, SnapshotSource] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def add(self, gateway: str) -> SnapshotSource:
        source = SnapshotSource(
            self.url,
            self.secret,
            gateway_id=gateway,
            public_keys=TEST_KEYS,
            cache_path=self.cache_dir / f"{gateway}.json",
            interval=INTERVAL,
            timeout=POLL_TIMEOUT,
        )
        self.sources[gateway] = source
        thread = threading.Thread(target=self._poll, args=(gateway, source))
        thread.daemon = True
        self._threads.append(thread)
        thread.start()
        return source

    def _poll(self, gateway: str, source: SnapshotSource) -> None:
        while not self._stop.is_set():
            sent = time.monotonic()
            result = source.poll_once()
            self.results.append((sent, gateway, result, time.monotonic() - sent))
            self._stop.wait(INTERVAL)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)

    def between(self, start: float, end: float) -> list[PollResult]:
        """What the polls sent from ``start`` to ``end`` got (failures included)."""
        return [r for at, _, r, _ in self.results if start <= at < end]

    def took(self, start: float, end: float) -> list[float]:
        """How long the polls sent from ``start`` to ``end`` took."""
        return [t for at, _, _, t in self.results if start <= at < end]

    def answered(self, *, since: float) -> int:
        """The fewest polls sent since ``since`` that any one gateway had answered."""
        counts = dict.fromkeys(self.sources, 0)
        for at, gateway, result, _ in list(self.results):
            if at >= since and result is not PollResult.FAILED:
                counts[gateway] += 1
        return min(counts.values())

    def versions(self) -> set[int]:
        return {s.current().version for s in self.sources.values()}


def test_cp_redis_paused_then_killed__fleet_polls_answered_reports_kept(
    control_plane, cp_redis, tmp_path
):
    # Given 12 gateways polling every 0.2 s, all on version 1
    server, secret = control_plane
    fleet = Fleet(f"{server.url}/api/v1/snapshot", secret, tmp_path)
    for index in range(12):
        fleet.add(f"gw-{index}")
    wait_until(lambda: fleet.versions() == {1}, timeout=30, why="fleet on v1")
    try:
        # When the control plane's Redis stops answering anything for 3 s, and
        # until every gateway has been answered during it, and a new gateway (no
        # ETag, no file) starts meanwhile and gets its rules. (Its process is
        # stopped, then continued: what was answered before `unpaused` was
        # answered without Redis. CLIENT PAUSE ... ALL would hold the UNPAUSE
        # too, so it could only end on Redis's clock.)
        cp_redis.process.send_signal(signal.SIGSTOP)
        paused = time.monotonic()
        try:
            time.sleep(1.0)
            newcomer = fleet.add("gw-new")
            wait_until(
                lambda: newcomer.current().version == 1,
                timeout=PATIENCE,
                every=0.05,
                why="the newcomer on v1",
            )
            newcomer_at = time.monotonic() - paused
            wait_until(
                lambda: fleet.answered(since=paused) >= ANSWERED,
                timeout=PATIENCE,
                why=f"{ANSWERED} polls per gateway during the pause",
            )
            time.sleep(max(0.0, paused + 3.0 - time.monotonic()))
            unpaused = time.monotonic()
        finally:
            cp_redis.process.send_signal(signal.SIGCONT)
        wait_until(
            lambda: fleet.answered(since=unpaused) >= 1,
            timeout=PATIENCE,
            why="every gateway answered after the pause",
        )
        # and then it is killed, a version 2 is published (into Postgres only:
        # its Redis write fails), and it comes back empty once every gateway is
        # on version 2 and has been answered while it was dead, for 4 s or more
        cp_redis.kill()
        killed = time.monotonic()
        TenantFactory(slug="hooli", tier=control_plane_tier())
        snapshot_publish(actor=Actor.system(), message="v2 while Redis is down")
        wait_until(lambda: fleet.versions() == {2}, timeout=PATIENCE, why="fleet on v2")
        on_v2 = time.monotonic()
        wait_until(
            lambda: fleet.answered(since=killed) >= DEAD_ANSWERED,
            timeout=PATIENCE,
            why=f"{DEAD_ANSWERED} polls per gateway while Redis is dead",
        )
        time.sleep(max(0.0, killed + 4.0 - time.monotonic()))
        restarted = time.monotonic()
        cp_redis.start()
        # (the first flush of each web process after Redis returns writes what
        # it kept; polls answered since are counted too, so what was kept shows
        # as counts beyond every poll answered after the restart)
        while_dead = fleet.between(killed, restarted)
        stored = redis.Redis.from_url(cp_redis.url)

        def counted() -> int:
            return sum(
                int(stored.hget(COUNTERS_KEY, poll_field(result)) or 0)
                for result in ("304", "200")
            )

        def kept() -> bool:
            now = counted()
            since = len(fleet.between(restarted, float("inf")))
            return now >= len(while_dead) and now - since >= len(while_dead) // 2

        wait_until(kept, timeout=PATIENCE, why="the polls counted while dead")
        wait_until(
            lambda: (
                {g.decode() for g in stored.hgetall(FLEET_KEY)} == set(fleet.sources)
            ),
            timeout=PATIENCE,
            why="every gateway's report",
        )
        stored.close()
    finally:
        fleet.stop()
    # Then every poll was answered, while paused and while dead: no error, no timeout
    during_pause = fleet.between(paused, unpaused)
    assert len(during_pause) >= 12 * ANSWERED
    assert len(while_dead) >= 12 * DEAD_ANSWERED
    # (from the pause on: a poll may fail while gunicorn's second worker boots)
    failed = [r for r in fleet.results if r[2] is PollResult.FAILED and r[0] >= paused]
    assert not failed, (
        f"{len(failed)} polls failed, first at {failed[0][0] - paused:.2f} s"
    )
    # and they did not wait for the control plane's Redis as its other calls do
    # (2 s and retries): a median, since a stalled worker makes a few slow, but
    # no load makes a poll that waited 2 s faster
    assert median(fleet.took(paused, unpaused)) < ORDINARY_REDIS_TIMEOUT
    assert median(fleet.took(killed, restarted)) < ORDINARY_REDIS_TIMEOUT
    # and the newcomer got version 1 during the pause; version 2 reached the
    # fleet from Postgres while Redis was dead (both waited for above, before
    # Redis answered again); the fleet's reports and the polls counted while it
    # was dead reached Redis once it was back (waited for above)
    assert newcomer_at < unpaused - paused
    assert on_v2 < restarted
    print(
        f"fault: control plane's Redis paused {unpaused - paused:.1f} s then killed "
        f"{restarted - killed:.1f} s under 13 polling gateways: {len(during_pause)} "
        f"polls during the pause (a new gateway got its rules "
        f"{newcomer_at - 1.0:.2f} s after it started) and {len(while_dead)} while "
        f"dead, none failed; version 2 published meanwhile reached every gateway "
        f"{on_v2 - killed:.1f} s after the kill (from Postgres); the polls counted "
        f"while dead written once Redis was back"
    )


def control_plane_tier():
    from limits.models import Tier

    return Tier.objects.get(slug="free")


@pytest.fixture
def one_worker(rules, cp_redis, settings):
    """gunicorn with a single worker (every poll meets the same memory), version 1 published."""
    server, secret = serve(cp_redis, settings, workers=1, token="one")
    yield server, secret
    server.stop()


def test_cp_redis_paused__process_knows_the_etag_not_the_bytes__bundle_from_postgres(
    one_worker, cp_redis
):
    # Given a control plane process that has answered a 304 (it knows the
    # bundle's ETag from Redis) but never sent the bundle's bytes
    server, secret = one_worker
    stored = redis.Redis.from_url(cp_redis.url)
    etag = stored.hget(BUNDLE_KEY, "etag").decode()
    url = f"{server.url}/api/v1/snapshot"
    known = poll(url, secret, "gw-old", etag=etag)
    assert known.status == 304
    try:
        # When its Redis stops answering and a new gateway (no ETag) polls
        stored.execute_command("CLIENT", "PAUSE", 3000, "ALL")
        began = time.monotonic()
        fresh = poll(url, secret, "gw-new")
        took = time.monotonic() - began
    finally:
        stored.execute_command("CLIENT", "UNPAUSE")
        stored.close()
    # Then it gets the bundle, built from Postgres, after the poll path's Redis
    # timeout (0.25 s) and a build: sooner than one wait of the 2 s timeout (and
    # retries) of the control plane's other Redis calls, which a poll that used
    # it could not beat however fast the machine
    assert fresh.status == 200
    assert fresh.headers["ETag"].strip('W/"') == etag.strip('"')
    assert took < ORDINARY_REDIS_TIMEOUT
    print(
        f"fault: control plane's Redis paused: a new gateway's bundle in {took:.2f} s"
    )


def poll(url: str, secret: str, gateway: str, *, etag: str | None = None):
    """One poll as a gateway sends it; the answer (status, headers), 304 included."""
    import urllib.error
    import urllib.request

    headers = {"Authorization": f"Bearer {secret}", "Sluice-Gateway-Id": gateway}
    if etag:
        headers["If-None-Match"] = etag
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            answer.read()
            return answer
    except urllib.error.HTTPError as answer:
        # closed at once: gunicorn's sync worker lingers up to 2 s on a
        # connection its client keeps open, and the next poll would wait for it
        answer.close()
        return answer
