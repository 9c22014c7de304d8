"""The control plane's Redis paused, then killed, under a fleet of polling gateways.

The control plane is gunicorn in a subprocess on the test database and a Redis
of this test's own (so it can be paused and killed); the gateways are real
``SnapshotSource`` pollers. Polls must keep being answered (304 or 200, never
an error): from the process's memory and Postgres while Redis does not answer,
and the reports made meanwhile must reach Redis once it is back.
"""

from __future__ import annotations

import os
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
from tests.servers import ControlPlaneServer, RedisServer

pytestmark = pytest.mark.django_db(transaction=True)

INTERVAL = 0.2  #: seconds between a gateway's polls


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
    results: list[tuple[float, str, PollResult]] = field(default_factory=list)
    sources: dict[str, SnapshotSource] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    def add(self, gateway: str) -> SnapshotSource:
        source = SnapshotSource(
            self.url,
            self.secret,
            gateway_id=gateway,
            cache_path=self.cache_dir / f"{gateway}.json",
            interval=INTERVAL,
            timeout=2.0,
        )
        self.sources[gateway] = source
        thread = threading.Thread(target=self._poll, args=(gateway, source))
        thread.daemon = True
        self._threads.append(thread)
        thread.start()
        return source

    def _poll(self, gateway: str, source: SnapshotSource) -> None:
        while not self._stop.is_set():
            self.results.append((time.monotonic(), gateway, source.poll_once()))
            self._stop.wait(INTERVAL)

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(10)

    def between(self, start: float, end: float) -> list[PollResult]:
        return [r for at, _, r in self.results if start <= at < end]

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
    admin = redis.Redis.from_url(cp_redis.url)
    try:
        # When the control plane's Redis stops answering anything for 3 s,
        # and a new gateway (no ETag, no file) starts meanwhile
        admin.execute_command("CLIENT", "PAUSE", 3000, "ALL")
        paused = time.monotonic()
        time.sleep(1.0)
        newcomer = fleet.add("gw-new")
        wait_until(lambda: newcomer.current().version == 1, timeout=1.5, every=0.05)
        newcomer_at = time.monotonic() - paused
        time.sleep(max(0.0, paused + 2.8 - time.monotonic()))
        unpaused = time.monotonic()
        time.sleep(1.5)
        # and then it is killed, a version 2 is published (into Postgres only:
        # its Redis write fails), and it comes back 4 s later, empty
        cp_redis.kill()
        killed = time.monotonic()
        TenantFactory(slug="hooli", tier=control_plane_tier())
        snapshot_publish(actor=Actor.system(), message="v2 while Redis is down")
        wait_until(lambda: fleet.versions() == {2}, timeout=15, why="fleet on v2")
        on_v2 = time.monotonic()
        time.sleep(max(0.0, killed + 4.0 - time.monotonic()))
        cp_redis.start()
        restarted = time.monotonic()
        time.sleep(2.5)
    finally:
        fleet.stop()
        admin.close()
    # Then every poll was answered, while paused and while dead: no error, no timeout
    during_pause = fleet.between(paused, unpaused)
    while_dead = fleet.between(killed, restarted)
    assert len(during_pause) >= 12 * 5
    assert len(while_dead) >= 12 * 5
    # (from the pause on: a poll may fail while gunicorn's second worker boots)
    failed = [r for r in fleet.results if r[2] is PollResult.FAILED and r[0] >= paused]
    assert not failed, (
        f"{len(failed)} polls failed, first at {failed[0][0] - paused:.2f} s"
    )
    # and the newcomer got version 1 during the pause; version 2 reached the
    # fleet from Postgres while Redis was dead
    assert newcomer_at < 2.8
    assert on_v2 < restarted
    # and once Redis is back, the fleet's reports are there, and the polls
    # counted while it was dead were written with them
    stored = redis.Redis.from_url(cp_redis.url)
    fleet_hash = stored.hgetall(FLEET_KEY)
    counted = sum(
        int(stored.hget(COUNTERS_KEY, poll_field(result)) or 0)
        for result in ("304", "200")
    )
    stored.close()
    assert {g.decode() for g in fleet_hash} == set(fleet.sources)
    assert counted >= len(while_dead)
    print(
        f"fault: control plane's Redis paused 3 s then killed 4 s under 13 polling "
        f"gateways: {len(during_pause)} polls during the pause (a new gateway got its "
        f"rules {newcomer_at - 1.0:.2f} s after it started) and {len(while_dead)} "
        f"while dead, none failed; version 2 published meanwhile reached every gateway "
        f"{on_v2 - killed:.1f} s after the kill (from Postgres); {counted} polls counted "
        f"once Redis was back"
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
    # Then it gets the bundle, built from Postgres, within the poll path's
    # Redis timeout and a build: not after the 2 s (and retries) of other calls
    assert fresh.status == 200
    assert fresh.headers["ETag"].strip('W/"') == etag.strip('"')
    assert took < 1.5
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
