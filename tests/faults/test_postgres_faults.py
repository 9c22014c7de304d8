"""Postgres ends the publishing connection mid-publish: nothing is half-written.

A restart of Postgres ends every backend the way ``pg_terminate_backend`` ends
one (a fast shutdown sends each backend SIGTERM), then refuses connections
until it is back. These tests end exactly the backend of interest at a chosen
moment, on the test database, instead of restarting the machine's shared
server: the publish is caught after it has written its snapshot row and
before it commits, the moment a restart would do the most harm.
"""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from django.db import connections

from limits.core.audit import Actor
from limits.gateways.bundle import snapshot_bundle_etag
from limits.models import AuditEntry, Limit, Snapshot
from limits.publishing.services import snapshot_publish
from limits.versions.selectors import snapshot_get_active
from tests.celery_fixtures import database_url

pytestmark = pytest.mark.django_db(transaction=True)


def admin_connection() -> psycopg.Connection:
    return psycopg.connect(database_url(), autocommit=True)


def waiting_on_lock(admin: psycopg.Connection, *, timeout: float = 20.0) -> int:
    """The pid of the backend blocked on a lock (the publish), once it is."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
        if row:
            return row[0]
        time.sleep(0.02)
    raise AssertionError("the publish never reached the audit insert")


def publish_in_thread(outcome: list) -> threading.Thread:
    def run() -> None:
        try:
            outcome.append(snapshot_publish(actor=Actor.system(), message="v2"))
        except Exception as exc:  # the point of the test: what it raises
            outcome.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_publish__connection_terminated_after_the_snapshot_row__nothing_half_written(
    rules, redis_client
):
    # Given version 1 active, its bundle in Redis, and a rule changed since
    snapshot_publish(actor=Actor.system(), message="v1")
    etag = snapshot_bundle_etag()
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=60)
    # When the publish has inserted version 2 and waits for the audit table,
    # and Postgres ends its backend there
    blocker, admin = admin_connection(), admin_connection()
    blocker.autocommit = False
    blocker.execute("LOCK TABLE limits_auditentry IN ACCESS EXCLUSIVE MODE")
    outcome: list = []
    thread = publish_in_thread(outcome)
    admin.execute("SELECT pg_terminate_backend(%s)", [waiting_on_lock(admin)])
    thread.join(30)
    blocker.rollback()
    blocker.close()
    admin.close()
    # Then the publish failed with a database error, and nothing of it remains
    assert len(outcome) == 1
    assert "terminat" in str(outcome[0]).lower()
    assert list(Snapshot.objects.values_list("version", flat=True)) == [1]
    assert snapshot_get_active().version == 1
    assert snapshot_bundle_etag() == etag
    assert not AuditEntry.objects.filter(action="publish", reason="v2").exists()
    # and the next publish, on a new connection, takes version 2
    assert snapshot_publish(actor=Actor.system(), message="v2 again").version == 2
    print(
        f"fault: publish connection ended mid-publish: {type(outcome[0]).__name__}; "
        "no version 2 row, active version and bundle unchanged; next publish v2"
    )
