"""The notice period: lowerings are published ahead of time, unless an emergency."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.core.management import CommandError, call_command
from django.utils import timezone

from limits.choices import AuditAction
from limits.core.audit import Actor
from limits.models import AuditEntry, Limit, Policy, Route, Snapshot, Tenant
from limits.publishing.notice import NoticePeriodTooShort
from limits.publishing.rollback import snapshot_rollback
from limits.publishing.services import snapshot_publish
from limits.rules.services import rule_delete
from tests.celery_fixtures import wait_until
from tests.factories import PolicyFactory, RouteFactory
from tests.limits.announce_fixtures import lower_pro_search

# A person publishing a lowering needs approval (tests/limits/changes/): not the subject here.
pytestmark = pytest.mark.usefixtures("no_approval_rule")

SYSTEM = Actor.system("test")
DAY = timedelta(days=1)


def _raise_pro_search(rules):
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=80, burst=160)


def _new_route(rules):
    RouteFactory(slug="reports", path_pattern="/v1/reports")


def _dearer_route(rules):
    Route.objects.filter(slug="orders.read").update(cost=3)


def _acme_to_free(rules):
    Tenant.objects.filter(slug="acme").update(tier=rules["free"])


@pytest.mark.parametrize(
    ("change", "days", "allowed"),
    [
        pytest.param(lower_pro_search, None, False, id="lowered-now"),
        pytest.param(lower_pro_search, 13, False, id="lowered-in-13-days"),
        pytest.param(lower_pro_search, 14, True, id="lowered-in-14-days"),
        pytest.param(lower_pro_search, 30, True, id="lowered-in-30-days"),
        pytest.param(_raise_pro_search, None, True, id="raised-now"),
        pytest.param(_new_route, None, True, id="new-route-now"),
        pytest.param(_dearer_route, None, False, id="dearer-route-now"),
        pytest.param(_acme_to_free, None, False, id="tenant-to-lower-tier-now"),
    ],
)
def test_snapshot_publish__notice_rule__lowerings_wait_the_notice_period(
    rules, published, change, days, allowed
):
    # Given a change to the working copy, published to take effect in `days` (None: now),
    # and an hour (the notice counts from the publish, a moment later than this: an hour
    # covers that moment on any machine, and is far from the next day either way)
    change(rules)
    effective_at = timezone.now() + days * DAY + timedelta(hours=1) if days else None
    # When it is published without an emergency reason
    try:
        row = snapshot_publish(actor=SYSTEM, message="m", effective_at=effective_at)
    except NoticePeriodTooShort:
        row = None
    # Then only raises, new routes and well-announced lowerings are accepted
    assert (row is not None) is allowed
    assert Snapshot.objects.count() == (2 if allowed else 1)


@pytest.mark.parametrize(
    ("expired", "allowed"),
    [pytest.param(True, True, id="expired"), pytest.param(False, False, id="live")],
)
def test_snapshot_publish__override_removed__notice_only_while_it_still_applies(
    rules, published, expired, allowed
):
    # Given a support raise for acme on search, published, that expires in 2 s (or a week)
    expires = timezone.now() + (timedelta(seconds=2) if expired else 7 * DAY)
    override = PolicyFactory(
        tenant=rules["acme"],
        route=rules["search"],
        override=True,
        expires_at=expires,
        limit__rate=500,
        limit__burst=1000,
    )
    snapshot_publish(actor=SYSTEM, message="Launch week for acme")
    if expired:  # and the time passes (a publish counts in whole seconds)
        wait_until(
            lambda: timezone.now().replace(microsecond=0) > expires,
            every=0.1,
            why="the override's expiry",
        )
    # When support clears it away and that is published now
    rule_delete(obj=Policy.objects.get(pk=override.pk), actor=SYSTEM, reason="done")
    try:
        row = snapshot_publish(actor=SYSTEM, message="Clear the override")
    except NoticePeriodTooShort:
        row = None
    # Then an expired override lowers no one (gateways dropped it at its expiry):
    # no notice, no tenant to notify; a live one still takes a raise away
    assert (row is not None) is allowed
    if row is not None:
        (change,) = row.diff["changes"]
        assert (change["kind"], change["lowers"]) == ("removed", False)
        assert "had expired" in change["text"]
        assert row.diff["affected"]["tenants"] == []


def test_snapshot_publish__lowering_too_soon__error_names_changes_and_earliest_time(
    rules, published, settings
):
    # Given a notice period of 3 days and a lowering of pro search
    settings.SLUICE_NOTICE_PERIOD_DAYS = 3
    lower_pro_search(rules)
    # When it is published to take effect in two days
    before = timezone.now()
    with pytest.raises(ValidationError) as caught:
        snapshot_publish(
            actor=SYSTEM, message="m", effective_at=timezone.now() + 2 * DAY
        )
    after = timezone.now()
    # Then the error, on effective_at, names the lowered change and the earliest time
    error = caught.value
    assert isinstance(error, NoticePeriodTooShort)
    text = error.message_dict["effective_at"][0]
    assert "tier pro · search: per tenant: 50 / s, burst 100 → 20 / s, burst 40" in text
    assert f"{error.earliest:%Y-%m-%d %H:%M:%S} UTC" in text
    # (three days after the publish, which happened, in whole seconds, in between)
    published = before.replace(microsecond=0), after
    assert published[0] + 3 * DAY <= error.earliest <= published[1] + 3 * DAY
    # And three days and an hour is enough (the hour covers the time the publish takes)
    row = snapshot_publish(
        actor=SYSTEM,
        message="m",
        effective_at=timezone.now() + 3 * DAY + timedelta(hours=1),
    )
    assert row.activated_at is None


@pytest.mark.parametrize("reason", ["", "   "])
def test_snapshot_publish__emergency_without_reason__refused(rules, published, reason):
    # Given a lowering / When published now with a blank emergency reason / Then refused
    lower_pro_search(rules)
    with pytest.raises(NoticePeriodTooShort):
        snapshot_publish(actor=SYSTEM, message="m", emergency_reason=reason)


def test_snapshot_publish__emergency_with_reason__takes_effect_marked_and_audited(
    rules, published, publisher
):
    # Given a lowering that cannot wait
    lower_pro_search(rules)
    # When product publishes it now as an emergency
    row = snapshot_publish(
        actor=publisher,
        message="Protect search",
        emergency_reason="  Search cluster overloaded  ",
        note="Search is limited harder while we recover.",
    )
    # Then it is active at once, its announcement marked as an emergency with the reason
    assert row.activated_at is not None
    announcement = row.announcement
    assert announcement.is_emergency
    assert announcement.emergency_reason == "Search cluster overloaded"
    assert announcement.note == "Search is limited harder while we recover."
    assert announcement.lowers
    assert announcement.notice_days == 14
    # And the publish is audited with the reason, by its author
    entry = AuditEntry.objects.get(action=AuditAction.PUBLISH, object_id=str(row.pk))
    assert entry.actor == "product"
    assert entry.after["emergency"] is True
    assert entry.after["emergency_reason"] == "Search cluster overloaded"
    assert entry.reason == "Protect search [emergency: Search cluster overloaded]"


def test_snapshot_rollback__lowers_limits__needs_notice_or_emergency(rules, published):
    # Given version 2 raised pro search (at once, as raises may)
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=80, burst=160)
    snapshot_publish(actor=SYSTEM, message="Raise search")
    # When rolling back to version 1 now, which lowers pro search again
    with pytest.raises(NoticePeriodTooShort):
        snapshot_rollback(actor=SYSTEM, version=1, message="Undo")
    # Then nothing changed; with an emergency reason it goes through, marked
    assert Snapshot.objects.count() == 2
    row = snapshot_rollback(
        actor=SYSTEM, version=1, message="Undo", emergency_reason="Raise was a mistake"
    )
    assert row.restored_version == 1
    assert row.announcement.is_emergency


def test_snapshot_rollback__scheduled_after_notice__accepted_without_emergency(
    rules, published
):
    # Given version 2 raised pro search
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=80, burst=160)
    snapshot_publish(actor=SYSTEM, message="Raise search")
    # When the rollback to version 1 is scheduled after the notice period
    row = snapshot_rollback(
        actor=SYSTEM,
        version=1,
        message="Back to the old limits",
        effective_at=timezone.now() + 15 * DAY,
    )
    # Then it waits, announced without emergency
    assert row.activated_at is None
    assert not row.announcement.is_emergency
    assert row.announcement.lowers


def test_publish_command__emergency_flags__published_and_marked(rules, published):
    # Given a lowering
    lower_pro_search(rules)
    # When the command publishes it without, then with an emergency reason
    with pytest.raises(CommandError, match="cannot take effect before"):
        call_command("publish", message="Lower")
    call_command(
        "publish", message="Lower", emergency_reason="Abuse", note="Temporary."
    )
    # Then version 2 is the emergency, with its note
    announcement = Snapshot.objects.get(version=2).announcement
    assert (announcement.emergency_reason, announcement.note) == ("Abuse", "Temporary.")
