"""The control plane stops while gateways run; Postgres ends a web process's connections.

The control plane is gunicorn in a subprocess on the test database, so it can
be stopped like a real deployment.
"""

from __future__ import annotations

import os
import time
import urllib.error
import urllib.request

import psycopg
import pytest
from django.db import connection

from limits.core.audit import Actor
from limits.gateways.tokens import token_create
from limits.models import GatewayToken, Tier
from limits.publishing.services import snapshot_publish
from sluice import Limiter, SnapshotSource
from sluice.source import PollResult
from tests.celery_fixtures import database_url, wait_until
from tests.factories import TenantFactory
from tests.servers import ControlPlaneServer
from tests.signing import TEST_KEYS

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def control_plane(rules, redis_server, redis_client):
    """gunicorn on the test database with version 1 published; and a gateway token."""
    snapshot_publish(actor=Actor.system(), message="v1")
    secret = token_create(token=GatewayToken(name="gw"), actor=Actor.system())
    env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis_server.url,
        "DEBUG": "0",
        "SECRET_KEY": "tests-only",
        "LOG_LEVEL": "WARNING",
    }
    server = ControlPlaneServer(env).start()
    yield server, secret
    server.stop()


def search(limiter: Limiter):
    return limiter.decide(method="GET", path="/v1/search", tenant="acme", ip="10.0.0.1")


def test_control_plane_stopped__gateway_keeps_enforcing_and_restarts_from_its_file(
    control_plane, redis_server, tmp_path
):
    # Given a gateway polling every 0.2 s that enforces version 1 (pro search: burst 100)
    server, secret = control_plane
    url, cache = f"{server.url}/api/v1/snapshot", tmp_path / "lkg.json"
    source = SnapshotSource(
        url,
        secret,
        gateway_id="gw-1",
        public_keys=TEST_KEYS,
        cache_path=cache,
        interval=0.2,
        timeout=0.5,
    ).start()
    wait_until(lambda: source.current().version == 1, timeout=20, why="version 1")
    limiter = Limiter(redis_server.url, source, timeout=1.0)
    assert search(limiter).limit == 100
    # When the control plane stops while the gateway runs
    server.stop()
    wait_until(lambda: source.failures >= 2, timeout=20, why="failed polls")
    running = search(limiter)
    source.stop()
    # and the gateway restarts while the control plane is still down
    restarted = SnapshotSource(
        url, secret, gateway_id="gw-1", public_keys=TEST_KEYS, cache_path=cache
    )
    after_restart = search(Limiter(redis_server.url, restarted, timeout=1.0))
    # Then both enforce version 1 from memory and from the file, not the fallback
    for decision in (running, after_restart):
        assert decision.snapshot_version == 1
        assert decision.limit == 100
        assert not decision.degraded
    print(
        f"fault: control plane stopped: gateway on version {running.snapshot_version} "
        f"after {source.failures} failed polls, restarted gateway on version "
        f"{after_restart.snapshot_version} from its file"
    )


def test_control_plane_back_after_outage__new_rules_within_twice_the_poll_interval(
    control_plane, tmp_path
):
    # Given a gateway polling every 0.2 s, on version 1, whose every chosen wait
    # and every poll are kept
    server, secret = control_plane
    interval = 0.2
    source = SnapshotSource(
        f"{server.url}/api/v1/snapshot",
        secret,
        gateway_id="gw-back",
        public_keys=TEST_KEYS,
        cache_path=tmp_path / "lkg.json",
        interval=interval,
        timeout=0.5,
    )
    waits, polls = watch(source)
    source.start()
    wait_until(lambda: source.current().version == 1, timeout=20, why="version 1")
    # When the control plane is down for 5 failed polls in a row (a backoff
    # doubling up to 60 s would wait 6.4 s after them), version 2 is published
    # meanwhile, and it returns
    stopped = time.monotonic()
    server.stop()
    TenantFactory(slug="hooli", tier=Tier.objects.get(slug="free"))
    snapshot_publish(actor=Actor.system(), message="v2 while the web is down")
    wait_until(lambda: source.failures >= 5, timeout=60, why="5 failed polls")
    server.start()  # gunicorn accepts connections; its worker may still be booting
    wait_until(
        lambda: _get(server.url + "/api/v1/snapshots/1", secret) == 200, every=0.02
    )
    back = time.monotonic()  # it answers
    wait_until(lambda: source.current().version == 2, timeout=20, why="version 2")
    picked_up = time.monotonic() - back
    source.stop()
    # Then while it was down the gateway never waited more than twice its interval
    # between polls (what it chose, not how long this machine took to wake it)
    backoffs = [wait for failures, wait in waits if failures]
    assert len(backoffs) >= 5
    assert max(backoffs) <= 2 * interval
    # and the first poll the control plane answered after the outage brought the
    # new rules (none sent once it answered failed): so they came within that
    # wait of its return, plus the poll itself
    since_stop = [result for began, result in polls if began >= stopped]
    down = since_stop[since_stop.index(PollResult.FAILED) :]
    assert next(r for r in down if r is not PollResult.FAILED) is PollResult.APPLIED
    assert PollResult.FAILED not in [r for began, r in polls if began >= back]
    print(
        f"fault: control plane down ({len(backoffs)} failed polls, interval "
        f"{interval} s, longest wait {max(backoffs):.2f} s): new rules applied "
        f"{picked_up:.2f} s after it answered again"
    )


def watch(source: SnapshotSource) -> tuple[list, list]:
    """Keep each wait ``source`` chooses, with the failures it was chosen after, and
    each poll's start and result (to be called before it starts)."""
    waits, polls = [], []
    choose, poll = source.next_delay, source.poll_once

    def next_delay() -> float:
        wait = choose()
        waits.append((source.failures, wait))
        return wait

    def poll_once() -> PollResult:
        began = time.monotonic()
        result = poll()
        polls.append((began, result))
        return result

    source.next_delay, source.poll_once = next_delay, poll_once
    return waits, polls


def test_request__after_postgres_ended_the_web_process_connections__served(
    control_plane,
):
    # Given a web process that has served a request from the database
    server, secret = control_plane
    url = f"{server.url}/api/v1/snapshots/1"
    assert _get(url, secret) == 200
    # When Postgres ends its connections (as a restart does)
    ours = connection.connection.info.backend_pid
    with psycopg.connect(database_url(), autocommit=True) as admin:
        ended = [
            pid
            for pid, signalled in admin.execute(
                "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid() "
                "AND pid <> %s AND backend_type = 'client backend'",
                [ours],
            ).fetchall()
            if signalled
        ]
        assert ended
        # (a backend ends some time after its signal: until then a request
        # would still find its connection alive and prove nothing)
        wait_until(
            lambda: (
                not admin.execute(
                    "SELECT 1 FROM pg_stat_activity WHERE pid = ANY(%s)", [ended]
                ).fetchall()
            ),
            every=0.02,
            why="the ended backends gone",
        )
    # Then the next request is served on a new connection, not answered 500
    assert _get(url, secret) == 200
    print(f"fault: Postgres ended {len(ended)} web connection(s): next request 200")


def _get(url: str, secret: str) -> int:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {secret}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
