"""Scheduled activation end to end: Celery beat and a real worker, on a real broker."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from limits.choices import AuditAction
from limits.core.audit import Actor
from limits.gateways.bundle import snapshot_bundle_get
from limits.models import AuditEntry, Limit, Snapshot
from limits.publishing.services import snapshot_publish
from tests.celery_fixtures import wait_until

pytestmark = [
    pytest.mark.celery,
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("no_notice_period"),  # publishing mechanics only
]


def test_scheduled_snapshot__effective_time_comes__activated_by_beat(
    rules,
    redis_client,
    celery_worker,
    celery_beat,
):
    # Given version 1 active, and version 2 published to take effect in two seconds
    actor = Actor.system("e2e")
    snapshot_publish(actor=actor, message="v1")
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=20, burst=40)
    v2 = snapshot_publish(
        actor=actor, message="v2", effective_at=timezone.now() + timedelta(seconds=2)
    )
    assert v2.activated_at is None
    assert snapshot_bundle_get().scheduled == (2,)
    # When beat and the worker run past its effective time
    activated = wait_until(
        lambda: Snapshot.objects.filter(version=2, activated_at__isnull=False).first(),
        why=f"version 2 to be activated\n{celery_worker.output()[-3000:]}",
    )
    # Then it took effect no sooner than its time, audited as beat's doing, and the
    # worker rewrote the gateway bundle in Redis
    assert activated.activated_at >= activated.effective_at
    entry = AuditEntry.objects.get(action=AuditAction.ACTIVATE, object_repr="version 2")
    assert entry.actor == "celery beat"
    bundle = wait_until(
        lambda: (b := snapshot_bundle_get()) and b.active == 2 and b,
        why="the bundle to show version 2",
    )
    assert bundle.scheduled == ()
