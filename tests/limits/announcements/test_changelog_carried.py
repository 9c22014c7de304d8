"""A pending change stays one changelog entry while later versions carry it, and says
"cancelled" only when someone cancels it (limits.publishing.scheduled)."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import timedelta

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from limits.announcements.services import announcement_notify
from limits.changes.publishing import change_request_publish
from limits.changes.services import change_request_open
from limits.choices import AuditAction, DeliveryKind
from limits.core.audit import Actor
from limits.diff.diffing import RulesDiff
from limits.models import AuditEntry, Delivery, Limit, Snapshot
from limits.publishing.notice import NoticePeriodTooShort
from limits.publishing.scheduled import snapshot_cancel, snapshot_reschedule
from limits.publishing.services import _notice_start, snapshot_publish
from limits.rules.compiling import rules_compile
from limits.versions.selectors import snapshot_rules
from tests.limits.announce_fixtures import endpoint_for, lower_pro_search
from tests.limits.changes.test_change_requests import _override

SYSTEM = Actor.system("test")
ATOM = "{http://www.w3.org/2005/Atom}"


def _actor(user) -> Actor:
    return Actor(user=user, request_id="test", ip="127.0.0.1")


@pytest.fixture
def lowering(rules, published):
    """Version 2: pro search lowered in 15 days, announced to the tenants."""
    lower_pro_search(rules)
    row = snapshot_publish(
        actor=SYSTEM,
        message="Lower pro search",
        effective_at=timezone.now() + timedelta(days=15),
        note="Pro search moves to 20 requests per second.",
    )
    announcement_notify(announcement_id=row.announcement.pk)
    return row


def _carry_two_raises(support) -> list[Snapshot]:
    """Two unrelated overrides published now, each carried into the lowering."""
    carriers = []
    for tenant in ("acme", "initech"):
        request = change_request_open(
            actor=_actor(support), proposals=[_override(tenant)]
        )
        published = change_request_publish(
            change_request=request, actor=_actor(support)
        )
        carriers += published.carried
    return carriers


def test_changelog__lowering_carried_twice__one_upcoming_entry_in_json_and_feed(
    client, lowering, support
):
    # Given a lowering announced as version 2, then two overrides published now,
    # each carried into it (versions 3, 4 carry it as 5... the last carrier wins)
    carriers = _carry_two_raises(support)
    head = carriers[-1]
    # When anyone reads the changelog
    versions = client.get("/changelog/changes.json").json()["versions"]
    # Then the lowering is one upcoming entry, announced as 2, taking effect as the
    # last carrier, and nothing says "cancelled"
    upcoming = [v for v in versions if v["status"] == "upcoming"]
    assert [(v["announced_as"], v["version"]) for v in upcoming] == [(2, head.version)]
    assert upcoming[0]["note"] == "Pro search moves to 20 requests per second."
    assert [c["kind"] for c in upcoming[0]["changes"]] == ["lowered"]
    assert not [v for v in versions if v["status"] == "cancelled"]
    # And the entries are in effective order, latest first
    effective = [v["effective_at"] for v in versions]
    assert effective == sorted(effective, reverse=True)
    # And the feed has one item for it, with the id of its first announcement
    feed = ET.fromstring(client.get("/changelog/feed.atom").content)
    titles = [e.find(f"{ATOM}title").text for e in feed.findall(f"{ATOM}entry")]
    ids = [e.find(f"{ATOM}id").text for e in feed.findall(f"{ATOM}entry")]
    assert [t for t in titles if "upcoming" in t] == [
        f"Sluice · upcoming · Version {head.version}, effective "
        f"{head.effective_at:%Y-%m-%d %H:%M} UTC"
    ]
    assert not [t for t in titles if "cancelled" in t]
    assert "tag:sluice,2026:changelog/version/2" in ids
    # And the carriers keep the lowering's message: the carry is recorded once
    assert {c.message for c in carriers} == {"Lower pro search"}
    assert {c.announcement.carries.snapshot.version for c in carriers} == {2}
    # And every version's page shows the same entry
    assert "Announced as version 2" in client.get(f"/changelog/{head.version}/").text


def test_changelog__brand_setting__in_page_and_feed_titles(client, lowering, settings):
    settings.SLUICE_BRAND = "Acme Cloud"
    assert "<title>Acme Cloud API rate limits" in client.get("/changelog/").text
    feed = client.get("/changelog/feed.atom").text
    assert "<title>Acme Cloud API rate limits: changelog</title>" in feed
    assert "Acme Cloud · upcoming · Version 2" in feed


def test_cancel__carried_lowering__one_cancelled_entry_and_tenants_told(
    client, rules, lowering, support, publisher
):
    # Given the lowering carried into a later version, and an endpoint of acme's
    endpoint_for(rules["acme"], "https://hooks.example.test/acme")
    lowering.announcement.deliveries.all().delete()
    head = _carry_two_raises(support)[-1]
    # When a product person cancels it, with a public note
    snapshot_cancel(
        actor=publisher,
        version=head.version,
        reason="Customer feedback",
        note="We keep pro search at 50 per second.",
    )
    # Then the changelog says "cancelled" once, with the note, and no replacement
    versions = client.get("/changelog/changes.json").json()["versions"]
    cancelled = [v for v in versions if v["status"] == "cancelled"]
    assert [(v["announced_as"], v["replaced_by"]) for v in cancelled] == [(2, None)]
    assert cancelled[0]["cancellation_note"] == "We keep pro search at 50 per second."
    assert "this change will not take effect" in client.get("/changelog/").text
    feed = client.get("/changelog/feed.atom").text
    assert feed.count("cancelled ·") == 1
    # And the working copy no longer holds the lowering (the overrides stay)
    pro = Limit.objects.get(policy=rules["pro_search"])
    assert (pro.rate, pro.burst) == (50, 100)
    assert (
        rules_compile().digest()
        == snapshot_rules(Snapshot.objects.get(version=head.parent_version)).digest()
    )
    # And acme, told of the lowering, is told it is off; the audit log has it
    kinds = set(Delivery.objects.values_list("kind", flat=True))
    assert DeliveryKind.CANCELLATION in kinds
    entry = AuditEntry.objects.get(action=AuditAction.CANCEL)
    assert (entry.reason, entry.object_id) == ("Customer feedback", str(head.pk))


def test_cancel__refusals__field_named(lowering, publisher):
    with pytest.raises(ValidationError) as raised:
        snapshot_cancel(actor=publisher, version=lowering.version, reason=" ")
    assert "reason" in raised.value.message_dict
    with pytest.raises(ValidationError) as raised:
        snapshot_cancel(actor=publisher, version=1, reason="r")
    assert "took effect" in raised.value.message_dict["version"][0]


def test_reschedule__later__one_entry_new_date_tenants_told_again(
    client, lowering, publisher
):
    # Given the announced lowering / When it is moved 5 days later
    later = lowering.effective_at + timedelta(days=5)
    moved = snapshot_reschedule(
        actor=publisher, version=lowering.version, effective_at=later, reason="Asked"
    )
    # Then one upcoming entry, at the new time, announced as version 2
    versions = client.get("/changelog/changes.json").json()["versions"]
    upcoming = [v for v in versions if v["status"] == "upcoming"]
    assert [(v["announced_as"], v["version"]) for v in upcoming] == [(2, moved.version)]
    assert upcoming[0]["effective_at"] == later.isoformat()
    assert not [v for v in versions if v["status"] == "cancelled"]
    # And the new time is announced again; the move is audited
    assert moved.announcement.notified_at is None
    assert AuditEntry.objects.filter(action=AuditAction.RESCHEDULE).count() == 1


def test_reschedule__earlier_than_notice__refused(lowering, publisher):
    with pytest.raises(NoticePeriodTooShort):
        snapshot_reschedule(
            actor=publisher,
            version=lowering.version,
            effective_at=timezone.now() + timedelta(days=2),
            reason="Hurry",
        )
    lowering.refresh_from_db()
    assert lowering.superseded_at is None  # nothing half-written


def test_notice__carried_twice__still_counted_from_the_first_announcement(
    lowering, support
):
    # Given the lowering carried into a version, and that one into another
    first, head = _carry_two_raises(support)
    # When the head is re-issued once more (a third publish, days later)
    later = head.published_at + timedelta(days=3)
    diff = RulesDiff.from_json(head.diff)
    # Then its notice started when the lowering was first announced, not when the
    # version it re-issues was published (that would eat into the notice each time)
    assert _notice_start(diff, later, head) == lowering.published_at
    assert _notice_start(diff, later, first) == lowering.published_at
