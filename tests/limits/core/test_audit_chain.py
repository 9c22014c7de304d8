"""The audit log as a hash chain: every entry links to the one before it, the database
refuses to erase it, and ``audit_verify`` names the first entry that was tampered with."""

from __future__ import annotations

import threading
import time

import pytest
from django.core.management import CommandError, call_command
from django.db import DatabaseError, connection, transaction
from django.urls import reverse

from limits.choices import AuditAction
from limits.core.audit import Actor, audit_record
from limits.core.chain import GENESIS, chain_verify, entry_digest
from limits.models import AuditEntry
from limits.rules import services as rules_services
from tests.factories import TierFactory

pytestmark = pytest.mark.django_db


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
    assert [e.hash for e in stored] == [entry_digest(e) for e in stored]
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
                release.wait(5)
        except BaseException as exc:  # reported by the test
            errors.append(exc)
            recorded.set()
        finally:
            connection.close()

    thread = threading.Thread(target=slow_writer)
    thread.start()
    assert recorded.wait(5)
    # When another writer records a change meanwhile (it waits for the first to commit)
    second = threading.Thread(
        target=lambda: (
            rules_services.rule_save(obj=TierFactory.build(slug="fast"), actor=Actor()),
            connection.close(),
        )
    )
    second.start()
    second.join(0.5)
    assert second.is_alive()  # held by the chain lock, not linked to a stale head
    release.set()
    thread.join(5)
    second.join(5)
    # Then both are recorded, one after the other, and the chain verifies
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
    locked, errors = threading.Event(), []

    def publish():
        try:
            with transaction.atomic():
                publishing_lock(rules=True)
                locked.set()
                time.sleep(0.5)  # the edit below arrives meanwhile
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
    assert locked.wait(5)
    # When an API edit of that policy's limit comes in during the publish
    editor = threading.Thread(target=edit)
    editor.start()
    publisher.join(10)
    editor.join(10)
    # Then neither deadlocks: both are written, in turn, and the chain verifies
    assert not errors, errors
    policy.refresh_from_db()
    assert policy.reason == "published"
    assert Limit.objects.get(policy=policy).rate == 3
    assert chain_verify().intact
