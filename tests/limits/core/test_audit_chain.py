"""The audit log as a hash chain: every entry links to the one before it, the database
refuses to erase it, and ``audit_verify`` names the first entry that was tampered with."""

from __future__ import annotations

import threading

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.urls import reverse

from limits.choices import AuditAction
from limits.core.audit import Actor, audit_record
from limits.core.auditkeys import audit_keys
from limits.core.chain import GENESIS, chain_verify, entry_digest
from limits.models import AuditEntry
from limits.rules import services as rules_services
from tests.celery_fixtures import wait_until
from tests.factories import TierFactory

pytestmark = pytest.mark.django_db

#: Seconds a thread of these tests may take to get somewhere: generous, it only stops
#: a test that hangs (the order of events is checked with Postgres, not with time).
PATIENT = 120


def _waiting_for_a_lock() -> bool:
    """Whether a session of this database waits for a lock, as Postgres sees it (asked
    outside a transaction, so the activity view is read afresh each time)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0


def _record(n: int, **fields) -> AuditEntry:
    return audit_record(
        actor=Actor(name="test", request_id=f"req-{n}", ip="2001:DB8::5"),
        action=AuditAction.UPDATE,
        object_type="tier",
        object_id=str(n),
        object_repr=f"tier {n}",
        before={"rate": n},
        after={"rate": n + 1, "name": "Gold ✓"},
        reason=f"change {n}",
        **fields,
    )


def _verify() -> str:
    from io import StringIO

    out = StringIO()
    call_command("audit_verify", stdout=out)
    return out.getvalue()


def test_audit_record__three_entries__each_links_to_the_one_before():
    # Given an empty log / When three changes are recorded
    first, second, third = (_record(n) for n in range(3))
    # Then each carries its predecessor's hash and the digest of its stored content
    stored = list(AuditEntry.objects.order_by("id"))
    assert [e.prev_hash for e in stored] == [GENESIS, first.hash, second.hash]
    key = audit_keys()[0]
    assert [e.hash for e in stored] == [entry_digest(e, key) for e in stored]
    assert {e.key_id for e in stored} == {key.kid}
    assert stored[0].source_ip == "2001:db8::5"
    # And the command says it is intact, up to the last entry
    assert f"3 entries verified, up to entry {third.pk}; head {third.hash}" in _verify()


def test_audit_verify__superuser_edits_an_after_with_triggers_disabled__names_that_entry():
    # Given a chain of four entries
    entries = [_record(n) for n in range(4)]
    tampered = entries[2]
    # When a superuser holds the triggers off and rewrites one entry's after
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE limits_auditentry DISABLE TRIGGER USER")
        cursor.execute(
            "UPDATE limits_auditentry SET after = %s WHERE id = %s",
            ['{"rate": 1000, "name": "Gold ✓"}', tampered.pk],
        )
        cursor.execute("ALTER TABLE limits_auditentry ENABLE TRIGGER USER")
    # Then audit_verify fails, naming that entry and what is wrong with it
    with pytest.raises(CommandError) as failed:
        _verify()
    assert f"audit chain broken at entry {tampered.pk}: its content" in str(
        failed.value
    )
    assert f"(2 entries verified after entry {entries[1].pk})" in str(failed.value)


def test_audit_verify__an_entry_removed_behind_the_triggers__names_the_next_one():
    entries = [_record(n) for n in range(3)]
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute("DELETE FROM limits_auditentry WHERE id = %s", [entries[1].pk])
        cursor.execute("SET LOCAL session_replication_role = origin")
    state = chain_verify()
    assert (state.broken_id, state.verified) == (entries[2].pk, 1)
    assert "previous hash" in state.problem


@pytest.mark.parametrize(
    "statement",
    [
        "TRUNCATE limits_auditentry",
        "TRUNCATE limits_snapshot CASCADE",
        "UPDATE limits_auditentry SET reason = 'rewritten'",
        "DELETE FROM limits_auditentry",
    ],
)
def test_audit_log__erasing_statement__refused_by_the_database(statement):
    # Given a recorded change
    _record(1)
    # When anyone, even the tables' owner, tries to erase or rewrite history
    with (
        pytest.raises(DatabaseError) as refused,
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(statement)
    # Then the database refuses, and the entry is still there
    assert "refused" in str(refused.value)
    assert AuditEntry.objects.filter(reason="change 1").exists()


@pytest.mark.django_db(transaction=True)
def test_audit_record__two_transactions_at_once__chain_does_not_fork():
    # Given a transaction that has recorded a change and has not committed yet
    recorded, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def slow_writer():
        try:
            with transaction.atomic():
                rules_services.rule_save(
                    obj=TierFactory.build(slug="slow"), actor=Actor()
                )
                recorded.set()
                release.wait(PATIENT)
        except BaseException as exc:  # reported by the test
            errors.append(exc)
            recorded.set()
        finally:
            connection.close()

    thread = threading.Thread(target=slow_writer)
    thread.start()
    assert recorded.wait(PATIENT)
    # When another writer records a change meanwhile
    second = threading.Thread(
        target=lambda: (
            rules_services.rule_save(obj=TierFactory.build(slug="fast"), actor=Actor()),
            connection.close(),
        )
    )
    second.start()
    # Then it waits for the first to commit: held by the chain lock (Postgres says it
    # waits for one), not linked to a stale head
    wait_until(_waiting_for_a_lock, why="the second writer to wait for the chain lock")
    assert second.is_alive()
    release.set()
    thread.join(PATIENT)
    second.join(PATIENT)
    # And both are recorded, one after the other, and the chain verifies
    assert not thread.is_alive()
    assert not second.is_alive()
    assert not errors
    assert list(
        AuditEntry.objects.order_by("id").values_list("object_repr", flat=True)
    ) == ["Slow", "Fast"]
    assert chain_verify().intact


def test_audit_list__intact_then_broken__shows_the_chain_state(client, product_user):
    # Given two recorded changes, seen by a product person
    first, second = _record(1), _record(2)
    client.force_login(product_user)
    url = reverse("admin:limits_auditentry_changelist")
    # When the chain is intact, the list says how far it verifies
    assert f"Hash chain verified up to entry {second.pk}" in client.get(url).text
    # When an entry was rewritten behind the triggers, it says where it breaks
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(
            "UPDATE limits_auditentry SET reason = 'x' WHERE id = %s", [first.pk]
        )
        cursor.execute("SET LOCAL session_replication_role = origin")
    assert f"Hash chain broken at entry {first.pk}" in client.get(url).text


@pytest.mark.django_db(transaction=True)
def test_limit_edit_racing_a_publish__both_complete_one_after_the_other(rules):
    from limits.models import Limit, Policy
    from limits.publishing.services import publishing_lock

    # Given a publish that holds its locks and is about to rewrite a policy's row
    policy = Policy.objects.get(tier__slug="free", route=None)
    locked, proceed, errors = threading.Event(), threading.Event(), []

    def publish():
        try:
            with transaction.atomic():
                publishing_lock(rules=True)
                locked.set()
                proceed.wait(PATIENT)  # until the edit below waits for these locks
                Policy.objects.filter(pk=policy.pk).update(reason="published")
                _record(1)
        except BaseException as exc:  # reported by the test
            errors.append(exc)
            locked.set()
        finally:
            connection.close()

    def edit():
        try:
            limit = Limit.objects.get(policy=policy)
            limit.rate = 3
            rules_services.limit_save(limit=limit, actor=Actor())
        except BaseException as exc:
            errors.append(exc)
        finally:
            connection.close()

    publisher = threading.Thread(target=publish)
    publisher.start()
    assert locked.wait(PATIENT)
    # When an API edit of that policy's limit comes in during the publish (and waits
    # for its locks, as Postgres sees it), then the publish goes on
    editor = threading.Thread(target=edit)
    editor.start()
    wait_until(
        lambda: errors or _waiting_for_a_lock(),
        why="the edit to wait for the publish's locks",
    )
    proceed.set()
    publisher.join(PATIENT)
    editor.join(PATIENT)
    # Then neither deadlocks: both are written, in turn, and the chain verifies
    assert not publisher.is_alive()
    assert not editor.is_alive()
    assert not errors, errors
    policy.refresh_from_db()
    assert policy.reason == "published"
    assert Limit.objects.get(policy=policy).rate == 3
    assert chain_verify().intact
