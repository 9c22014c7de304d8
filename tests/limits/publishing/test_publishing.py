"""Publishing: validate, compile, store immutable versions, activate on time."""

from __future__ import annotations

import contextlib
import gzip
import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.management import CommandError, call_command
from django.db import DatabaseError, IntegrityError, connection, transaction
from django.utils import timezone

from limits.choices import AuditAction, Dimension, ScopeKind
from limits.core.audit import Actor
from limits.models import AuditEntry, Limit, Policy, Route, Snapshot, Tier
from limits.models.snapshots import SnapshotStatus
from limits.publishing.services import (
    InvalidRules,
    NothingToPublish,
    snapshot_activate_due,
    snapshot_publish,
)
from limits.rules.compiling import rules_compile
from limits.versions.selectors import snapshot_get_active, snapshot_list
from sluice import Snapshot as SnapshotDocument
from tests.conftest import default_policy
from tests.factories import (
    PolicyFactory,
    RouteFactory,
    TenantFactory,
    TierFactory,
    legacy_route,
)

# These tests are about publishing mechanics, not the notice period.
pytestmark = pytest.mark.usefixtures("no_notice_period", "no_approval_rule")

SYSTEM = Actor.system("test")


def _lower_pro_search(rules, *, rate=20, burst=40):
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=rate, burst=burst)


def test_snapshot_publish__first_version__stored_with_bytes_gzip_hash_and_active(
    rules, publisher
):
    # Given a working copy and nothing published
    # When it is published
    row = snapshot_publish(actor=publisher, message="First limits")
    # Then version 1 is active, and its bytes are the canonical document with its hash
    document = SnapshotDocument.from_bytes(bytes(row.content))
    assert (row.version, row.parent_version, document.version) == (1, None, 1)
    assert document.hash == row.hash
    assert row.etag == f'"{row.hash}"'
    assert gzip.decompress(bytes(row.content_gzip)) == bytes(row.content)
    assert document.rules.digest() == rules_compile().digest()
    assert row.rules_digest == rules_compile().digest()
    assert row.activated_at == row.published_at == row.effective_at
    assert (row.author, row.author_id) == ("product", publisher.user.pk)
    assert snapshot_get_active() == row
    assert row.diff["counts"]["new"] == len(row.diff["changes"]) > 0


def test_rules_compile__same_rules_inserted_in_another_order__same_bytes(db):
    # Given the same rules created twice, in opposite orders (other ids, other order)
    def build(order):
        default_policy()
        tiers = {slug: TierFactory(slug=slug) for slug in order(["free", "pro"])}
        routes = {s: RouteFactory(slug=s) for s in order(["a", "b", "c"])}
        for tier in order(list(tiers)):
            for route in order(list(routes)):
                policy = PolicyFactory(
                    scope=ScopeKind.TIER,
                    tier=tiers[tier],
                    route=routes[route],
                    limit=None,
                )
                for dimension in order(
                    [Dimension.TENANT, Dimension.USER, Dimension.IP]
                ):
                    Limit.objects.create(
                        policy=policy, dimension=dimension, rate=3, burst=9
                    )
        for n in order(list(range(5))):
            TenantFactory(slug=f"t{n}", tier=tiers["pro" if n % 2 else "free"])
        return SnapshotDocument.build(
            version=1,
            parent=None,
            published_at=datetime(2026, 12, 1, tzinfo=UTC),
            effective_at=datetime(2026, 12, 1, tzinfo=UTC),
            rules=rules_compile(),
        ).to_bytes()

    first = build(lambda items: list(items))
    Policy.objects.exclude(scope=ScopeKind.DEFAULT).delete()
    for model in ("Tenant", "Route", "Tier"):
        getattr(
            __import__("limits.models", fromlist=[model]), model
        ).objects.all().delete()
    # When compiled again after re-creating them in reverse order
    second = build(lambda items: list(reversed(items)))
    # Then the bytes are identical
    assert first == second


def test_snapshot_publish__unchanged_rules__refused_and_nothing_written(
    rules, publisher
):
    # Given a published working copy with no edit since
    snapshot_publish(actor=publisher, message="v1")
    entries = AuditEntry.objects.count()
    # When publishing again
    with pytest.raises(NothingToPublish, match="same as version 1"):
        snapshot_publish(actor=publisher, message="again")
    # Then nothing is stored or audited
    assert Snapshot.objects.count() == 1
    assert AuditEntry.objects.count() == entries


def _clash(rules):
    legacy_route(slug="search-again", path_pattern="/v1/search", methods=["GET"])


def _burst_below_cost(rules):
    Route.objects.filter(pk=rules["orders"].pk).update(cost=500)


@pytest.mark.parametrize(
    ("break_rules", "named"),
    [
        pytest.param(
            _clash, "route *, methods: GET /v1/search is claimed by both", id="clash"
        ),
        pytest.param(
            _burst_below_cost,
            "policy tier free · all routes, limit 1, burst: burst 10 is below the request cost 500",
            id="burst",
        ),
    ],
)
def test_snapshot_publish__invalid_rules__refused_naming_object_and_active_untouched(
    rules, publisher, break_rules, named
):
    # Given an active version, then an edit that breaks the rule set as a whole
    active = snapshot_publish(actor=publisher, message="v1")
    break_rules(rules)
    entries = AuditEntry.objects.count()
    # When publishing
    with pytest.raises(InvalidRules) as refused:
        snapshot_publish(actor=publisher, message="broken")
    # Then the error names the object and why, and nothing changed
    assert any(named in message for message in refused.value.messages), refused.value
    assert refused.value.problems
    assert snapshot_get_active() == active
    assert Snapshot.objects.count() == 1
    assert AuditEntry.objects.count() == entries


def test_snapshot_publish__change__diff_against_parent_stored_and_audited(
    rules, publisher
):
    # Given version 1, then pro search lowered
    snapshot_publish(actor=publisher, message="v1")
    _lower_pro_search(rules)
    # When publishing
    row = snapshot_publish(actor=publisher, message="Lower pro search")
    # Then version 2 replaces 1, with the lowering in words, and the publish is audited
    assert (row.version, row.parent_version) == (2, 1)
    (change,) = row.diff["changes"]
    assert change["kind"] == "lowered"
    assert change["text"] == (
        "tier pro · search: per tenant: 50 / s, burst 100 → 20 / s, burst 40"
    )
    assert row.diff["affected"]["tenants"] == ["acme"]  # globex has its own policy
    entry = AuditEntry.objects.filter(action=AuditAction.PUBLISH).first()
    assert (entry.object_repr, entry.actor, entry.reason) == (
        "version 2",
        "product",
        "Lower pro search",
    )
    assert entry.after["changes"]["lowered"] == 1
    assert entry.request_id == "test-request"


def test_snapshot_publish__future_effective_time__scheduled_until_due(rules, publisher):
    # Given version 1 active and version 2 published for tomorrow
    v1 = snapshot_publish(actor=publisher, message="v1")
    _lower_pro_search(rules)
    tomorrow = timezone.now() + timedelta(days=1)
    v2 = snapshot_publish(actor=publisher, message="later", effective_at=tomorrow)
    assert v2.activated_at is None
    assert snapshot_get_active() == v1
    # When activation runs before, then after its time
    before = snapshot_activate_due(actor=SYSTEM, now=tomorrow - timedelta(seconds=1))
    after = snapshot_activate_due(actor=SYSTEM, now=tomorrow + timedelta(seconds=1))
    # Then only the second run activates it, audited
    assert (before, [row.version for row in after]) == ([], [2])
    assert snapshot_get_active().version == 2
    assert (
        AuditEntry.objects.filter(
            action=AuditAction.ACTIVATE, object_repr="version 2"
        ).count()
        == 1
    )
    statuses = {row.version: row.status(row.active_version) for row in snapshot_list()}
    assert statuses == {1: SnapshotStatus.PAST, 2: SnapshotStatus.ACTIVE}


def test_snapshot_publish__sooner_version__supersedes_scheduled_one(rules, publisher):
    # Given version 2 scheduled for tomorrow
    snapshot_publish(actor=publisher, message="v1")
    _lower_pro_search(rules)
    tomorrow = timezone.now() + timedelta(days=1)
    snapshot_publish(actor=publisher, message="tomorrow", effective_at=tomorrow)
    # When version 3 is published to take effect now
    _lower_pro_search(rules, rate=10, burst=20)
    v3 = snapshot_publish(actor=publisher, message="now")
    # Then 3 replaces the active 1 directly, and 2 will never take effect
    assert (v3.parent_version, snapshot_get_active()) == (1, v3)
    v2 = Snapshot.objects.get(version=2)
    assert (v2.superseded_by, v2.status(3)) == (3, SnapshotStatus.SUPERSEDED)
    assert snapshot_activate_due(actor=SYSTEM, now=tomorrow + timedelta(hours=1)) == []
    assert v3.diff["changes"][0]["text"].endswith(
        "50 / s, burst 100 → 10 / s, burst 20"
    )


def test_snapshot_publish__later_version__chains_after_scheduled_one(rules, publisher):
    # Given version 2 scheduled for tomorrow
    snapshot_publish(actor=publisher, message="v1")
    _lower_pro_search(rules)
    tomorrow = timezone.now() + timedelta(days=1)
    snapshot_publish(actor=publisher, message="tomorrow", effective_at=tomorrow)
    # When version 3 is scheduled the day after
    _lower_pro_search(rules, rate=10, burst=20)
    v3 = snapshot_publish(
        actor=publisher, message="after", effective_at=tomorrow + timedelta(days=1)
    )
    # Then 3 replaces 2, and both take effect in turn
    assert v3.parent_version == 2
    activated = snapshot_activate_due(actor=SYSTEM, now=tomorrow + timedelta(days=2))
    assert [row.version for row in activated] == [2, 3]
    assert snapshot_get_active().version == 3


def test_snapshot_publish__tenant_override__expiry_carried_in_snapshot(
    rules, publisher
):
    # Given a temporary override for acme on search
    expires = (timezone.now() + timedelta(days=2)).replace(microsecond=0)
    PolicyFactory(
        scope=ScopeKind.TENANT,
        tenant=rules["acme"],
        route=rules["search"],
        expires_at=expires,
        reason="Launch week",
        limit__rate=500,
        limit__burst=1000,
    )
    # When published
    row = snapshot_publish(actor=publisher, message="Override for acme")
    # Then the snapshot carries the expiry, so gateways drop it on time by themselves
    document = SnapshotDocument.from_bytes(bytes(row.content))
    (override,) = [p for p in document.rules.policies if p.is_override]
    assert override.expires_at == expires
    assert b'"expires_at":"' + expires.strftime("%Y-%m-%dT%H:%M:%SZ").encode() in bytes(
        row.content
    )


def test_snapshot_publish__past_effective_time__refused(rules, publisher):
    with pytest.raises(ValidationError, match="must be in the future"):
        snapshot_publish(
            actor=publisher,
            message="v1",
            effective_at=timezone.now() - timedelta(hours=1),
        )
    assert not Snapshot.objects.exists()


@pytest.mark.parametrize("role", ["support", "viewer"])
def test_snapshot_publish__not_product__permission_denied(rules, request, role):
    actor = Actor(user=request.getfixturevalue(role))
    with pytest.raises(PermissionDenied):
        snapshot_publish(actor=actor, message="v1")


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE limits_snapshot SET message = 'rewritten'",
        "UPDATE limits_snapshot SET activated_at = now() - interval '1 day'",
        "DELETE FROM limits_snapshot",
    ],
)
def test_snapshot__rewritten_in_sql__refused_by_database(rules, publisher, statement):
    # Given a published, active version
    snapshot_publish(actor=publisher, message="v1")
    # When someone rewrites it behind the application's back / Then Postgres refuses
    with pytest.raises(DatabaseError, match="immutable"), transaction.atomic():
        connection.cursor().execute(statement)


def test_snapshot__saved_again__refused(rules, publisher):
    row = snapshot_publish(actor=publisher, message="v1")
    row.message = "rewritten"
    with pytest.raises(TypeError, match="immutable"):
        row.save()


def test_snapshot__second_row_with_same_version__refused_by_database(rules, publisher):
    row = snapshot_publish(actor=publisher, message="v1")
    row.pk, row._state.adding, row.hash = None, True, "0" * 64
    with pytest.raises(IntegrityError), transaction.atomic():
        row.save()


def test_publish_command__valid_rules__publishes_and_says_so(rules, capsys):
    call_command("publish", message="From the command line")
    assert "Published version 1" in capsys.readouterr().out
    assert Snapshot.objects.get().author.startswith("manage.py publish")


def test_publish_command__invalid_rules__fails_naming_the_object(rules):
    _burst_below_cost(rules)
    with pytest.raises(CommandError, match="policy tier free · all routes, limit 1"):
        call_command("publish", "--message", "broken")


def test_publish_command__scheduled__says_when(rules, capsys):
    call_command("publish", "-m", "later", "--effective-at", "2999-01-01T00:00:00Z")
    assert "effective at 2999-01-01 00:00:00 UTC" in capsys.readouterr().out


@pytest.mark.django_db(transaction=True)
def test_snapshot_publish__concurrent_threads__consecutive_versions_nothing_lost():
    # Given one tier per thread, each renamed then published, three rounds at once
    default_policy()
    threads = 4
    for n in range(threads):
        TierFactory(slug=f"t{n}", name="start")
    barrier, failures = threading.Barrier(threads), []

    def edit_and_publish(n: int) -> None:
        try:
            for round_ in range(3):
                # (publishes are serialized: a round lasts as long as four of them take
                # on this machine; the timeout only stops a test that hangs)
                barrier.wait(timeout=120)
                Tier.objects.filter(slug=f"t{n}").update(name=f"round {round_}")
                # NothingToPublish: another thread's publish already carried this edit
                with contextlib.suppress(NothingToPublish):
                    snapshot_publish(actor=SYSTEM, message=f"t{n} round {round_}")
        except Exception as exc:  # reported below, with its thread
            failures.append((n, exc))
            barrier.abort()  # the others stop waiting for this one
        finally:
            connection.close()

    # When they run concurrently
    workers = [
        threading.Thread(target=edit_and_publish, args=(n,)) for n in range(threads)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    # Then no publish failed, versions are 1..N with each replacing the one before,
    # and the latest carries every thread's last edit
    assert failures == []
    rows = list(Snapshot.objects.order_by("version"))
    assert [row.version for row in rows] == list(range(1, len(rows) + 1))
    assert [row.parent_version for row in rows] == [None, *range(1, len(rows))]
    latest = SnapshotDocument.from_bytes(bytes(rows[-1].content))
    assert latest.rules.tiers == {f"t{n}": "round 2" for n in range(threads)}
    assert AuditEntry.objects.filter(action=AuditAction.PUBLISH).count() == len(rows)
