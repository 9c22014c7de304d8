"""The gateway bundle in Redis: written on commit, readable without the database."""

from __future__ import annotations

import gzip
import json
from datetime import timedelta

import pytest
from django.utils import timezone

from limits.core.audit import Actor
from limits.gateways.bundle import (
    snapshot_bundle_build,
    snapshot_bundle_etag,
    snapshot_bundle_get,
    snapshot_bundle_sync,
)
from limits.gateways.keys import BUNDLE_KEY
from limits.models import Limit
from limits.publishing.services import snapshot_activate_due, snapshot_publish
from sluice import Snapshot as SnapshotDocument

# These tests are about publishing mechanics, not the notice period.
pytestmark = pytest.mark.usefixtures("no_notice_period")

SYSTEM = Actor.system("test")


@pytest.fixture
def publish(rules, redis_client, django_capture_on_commit_callbacks):
    """Publish with on-commit work run, as after a real commit."""

    def run(message, *, rate=None, **kwargs):
        if rate is not None:
            Limit.objects.filter(policy=rules["pro_search"]).update(rate=rate)
        with django_capture_on_commit_callbacks(execute=True):
            return snapshot_publish(actor=SYSTEM, message=message, **kwargs)

    return run


def test_bundle__publish_committed__active_snapshot_bytes_in_redis(
    publish, redis_client
):
    # Given nothing in Redis / When version 1 is published and committed
    row = publish("v1")
    # Then Redis holds the bundle: the stored bytes, unchanged, and their gzip
    bundle = snapshot_bundle_get()
    assert json.loads(bundle.body) == {
        "active": json.loads(bytes(row.content)),
        "scheduled": [],
    }
    assert bytes(row.content) in bundle.body  # embedded as published, not re-serialized
    assert gzip.decompress(bundle.body_gzip) == bundle.body
    assert (bundle.active, bundle.scheduled) == (1, ())
    assert redis_client.hget(BUNDLE_KEY, "etag").decode() == bundle.etag


def test_bundle_etag__stored__read_without_database_queries(
    publish, django_assert_num_queries
):
    # Given a published version whose bundle is in Redis
    publish("v1")
    expected = snapshot_bundle_build().etag
    # When a poll asks for the ETag / Then no query reaches Postgres
    with django_assert_num_queries(0):
        etag = snapshot_bundle_etag()
    assert etag == expected


def test_bundle__redis_lost_it__rebuilt_from_postgres_with_same_etag(
    publish, redis_client
):
    # Given a bundle in Redis, then Redis emptied
    publish("v1")
    before = snapshot_bundle_get()
    redis_client.flushdb()
    assert snapshot_bundle_etag() is None
    # When the bundle is asked for / Then it is rebuilt, byte for byte
    assert snapshot_bundle_get() == before
    assert snapshot_bundle_etag() == before.etag


def test_bundle__scheduled_version__carried_until_it_takes_effect(
    publish, django_capture_on_commit_callbacks
):
    # Given version 1 active, then version 2 scheduled for tomorrow
    publish("v1")
    tomorrow = timezone.now() + timedelta(days=1)
    v2 = publish("v2", rate=20, effective_at=tomorrow)
    # Then the bundle carries both, each a complete snapshot document
    bundle = snapshot_bundle_get()
    assert (bundle.active, bundle.scheduled) == (1, (2,))
    scheduled = json.loads(bundle.body)["scheduled"][0]
    assert SnapshotDocument.from_json(scheduled).hash == v2.hash
    # When it is activated / Then the bundle moves it to active, with a new ETag
    with django_capture_on_commit_callbacks(execute=True):
        activated = snapshot_activate_due(
            actor=SYSTEM, now=tomorrow + timedelta(seconds=1)
        )
    assert [row.version for row in activated] == [2]
    after = snapshot_bundle_get()
    assert (after.active, after.scheduled) == (2, ())
    assert after.etag != bundle.etag


def test_bundle__older_state_written_late__does_not_replace_newer(publish):
    # Given the bundle of version 1, kept aside, then version 2 published
    publish("v1")
    stale = snapshot_bundle_build()
    publish("v2", rate=20)
    fresh = snapshot_bundle_get()
    # When the stale bundle is written after the fresh one (a slow on-commit hook)
    from limits.gateways import bundle as module

    args = ["0", *stale.generation]
    for name, value in stale.fields().items():
        args += [name, value]
    written = module._client().eval(module._WRITE_IF_NEWER, 1, BUNDLE_KEY, *args)
    # Then Redis keeps the newer one
    assert written == 0
    assert snapshot_bundle_get() == fresh


def test_bundle_sync__bundle_behind_postgres__rewritten(publish, redis_client):
    # Given a publish whose bundle write was lost (Redis was down at commit)
    publish("v1")
    Limit.objects.filter(pk__in=Limit.objects.values("pk")[:1]).update(rate=77)
    snapshot_publish(actor=SYSTEM, message="v2 without on-commit work")
    assert snapshot_bundle_get().active == 1
    # When beat's sync runs / Then the bundle catches up; a second sync does nothing
    assert snapshot_bundle_sync() is True
    assert snapshot_bundle_get().active == 2
    assert snapshot_bundle_sync() is False


def test_bundle__superseded_version__left_out(publish):
    # Given version 2 for the day after tomorrow, then version 3 for tomorrow
    publish("v1")
    now = timezone.now()
    publish("v2", rate=20, effective_at=now + timedelta(days=2))
    publish("v3", rate=30, effective_at=now + timedelta(days=1))
    # Then gateways are only told about 3: version 2 will never take effect
    assert snapshot_bundle_get().scheduled == (3,)
