"""The runtime role: the application works as it, and it cannot erase history.

Roles belong to the whole Postgres cluster, shared by every test database (and by
other people's): each test database gets roles named after it, made idempotently by
``manage.py db_roles`` and dropped after the test.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from io import StringIO

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from limits.core.audit import Actor
from limits.core.auditkeys import AuditKey, audit_keys
from limits.core.chain import chain_head, chain_verify, entry_digest
from limits.models import AuditEntry, Snapshot, Tier
from limits.publishing.services import snapshot_publish
from limits.rules import services as rules

pytestmark = pytest.mark.django_db(transaction=True)


def _url(user: str, db: dict) -> str:
    return f"postgres://{user}@{db['HOST'] or '127.0.0.1'}:{db['PORT'] or 5432}/{db['NAME']}"


@pytest.fixture
def roles():
    """Owner and runtime roles for this test database, as ``db_roles`` sets them up."""
    db = dict(connection.settings_dict)
    owner, runtime = f"{db['NAME']}_owner"[:63], f"{db['NAME']}_app"[:63]
    admin = _url(db["USER"], db)
    urls = {
        "admin_url": admin,
        "owner_url": _url(owner, db),
        "runtime_url": _url(runtime, db),
    }
    out = StringIO()
    call_command("db_roles", **urls, stdout=out)
    call_command("db_roles", **urls, stdout=out)  # again: nothing breaks
    yield {"owner": owner, "runtime": runtime, "db": db, **urls}
    connection.close()
    with psycopg.connect(admin, autocommit=True) as conn:
        for role in (owner, runtime):
            conn.execute(f'REASSIGN OWNED BY "{role}" TO "{db["USER"]}"')
            conn.execute(f'DROP OWNED BY "{role}"')
            conn.execute(f'DROP ROLE "{role}"')


@pytest.fixture
def as_runtime(roles):
    """Django's connection, as the runtime role until the test ends."""
    saved = dict(connection.settings_dict)
    connection.close()
    connection.settings_dict.update(USER=roles["runtime"], PASSWORD="")
    yield roles
    connection.close()
    connection.settings_dict.clear()
    connection.settings_dict.update(saved)


ERASURES = [
    "ALTER TABLE limits_auditentry DISABLE TRIGGER limits_audit_append_only",
    "ALTER TABLE limits_auditentry DISABLE TRIGGER ALL",
    "DROP TRIGGER limits_audit_append_only ON limits_auditentry",
    "CREATE OR REPLACE FUNCTION limits_audit_refuse_change() RETURNS trigger "
    "AS $$ BEGIN RETURN NEW; END $$ LANGUAGE plpgsql",
    "TRUNCATE limits_auditentry",
    "UPDATE limits_auditentry SET after = '{}'",
    "DELETE FROM limits_auditentry",
    "SET session_replication_role = replica",
    "TRUNCATE limits_snapshot CASCADE",
    "DELETE FROM limits_snapshot",
    "UPDATE limits_snapshot SET message = 'rewritten'",
    "ALTER TABLE limits_snapshot DISABLE TRIGGER limits_snapshot_immutable",
    "INSERT INTO django_migrations (app, name, applied) VALUES ('limits', 'x', now())",
]


def test_runtime_role__erasing_history__refused(roles):
    # Given a recorded change and a published version
    rules.rule_save(obj=Tier(slug="gold", name="Gold"), actor=Actor.system())
    snapshot_publish(actor=Actor.system(), message="v1")
    refused = {}
    # When the runtime role tries every way to erase or rewrite them
    with psycopg.connect(roles["runtime_url"], autocommit=True) as conn:
        for statement in ERASURES:
            try:
                conn.execute(statement)
            except psycopg.Error as exc:
                refused[statement] = str(exc).splitlines()[0]
    # Then each one is refused, by privilege or by trigger, and history is intact
    assert set(refused) == set(ERASURES), set(ERASURES) - set(refused)
    assert "must be owner of table limits_auditentry" in refused[ERASURES[0]]
    assert "permission denied" in refused["TRUNCATE limits_auditentry"]
    assert AuditEntry.objects.filter(object_repr="Gold").exists()
    assert Snapshot.objects.filter(message="v1").exists()
    assert chain_verify().intact


def test_runtime_role__owns_nothing_and_is_no_superuser(roles):
    with psycopg.connect(roles["admin_url"], autocommit=True) as conn:
        owners = conn.execute(
            "SELECT DISTINCT pg_get_userbyid(relowner) FROM pg_class "
            "WHERE relnamespace = 'public'::regnamespace"
        ).fetchall()
        flags = conn.execute(
            "SELECT rolsuper, rolcreaterole, rolcreatedb FROM pg_roles WHERE rolname = %s",
            [roles["runtime"]],
        ).fetchone()
    assert owners == [(roles["owner"],)]
    assert flags == (False, False, False)


def test_runtime_role__audited_write_and_publish__work(as_runtime):
    # Given the application connected as the runtime role
    with connection.cursor() as cursor:
        cursor.execute("SELECT current_user")
        assert cursor.fetchone() == (as_runtime["runtime"],)
    # When a person-less process saves a tier and publishes (a snapshot, its activation)
    rules.rule_save(obj=Tier(slug="gold", name="Gold"), actor=Actor.system())
    published = snapshot_publish(actor=Actor.system(), message="as the runtime role")
    # Then both are stored and audited, and the chain verifies
    assert Snapshot.objects.get(pk=published.pk).activated_at is not None
    assert AuditEntry.objects.filter(object_type="tier", object_repr="Gold").exists()
    assert chain_verify().intact


def test_migrate__as_the_owner__grants_the_runtime_role_new_tables(roles, settings):
    # Given a migration URL naming the owner role
    settings.DATABASE_MIGRATE_URL, settings.DATABASE_URL = (
        roles["owner_url"],
        roles["runtime_url"],
    )
    # When migrations run (back past the chain, and forward again), as the owner
    call_command("migrate", "limits", "0012", verbosity=0)
    call_command("migrate", verbosity=0)
    # Then the tables remain the owner's and the runtime role may still only add to the log
    with psycopg.connect(roles["admin_url"], autocommit=True) as conn:
        grants = conn.execute(
            "SELECT privilege_type FROM information_schema.role_table_grants "
            "WHERE grantee = %s AND table_name = 'limits_auditentry' ORDER BY 1",
            [roles["runtime"]],
        ).fetchall()
    assert grants == [("INSERT",), ("SELECT",)]


def _forged_entry(prev_hash: str, key_id: str) -> dict:
    """The issue's forged entry: back-dated to 2020, signed "admin", after the head."""
    return {
        "created_at": datetime(2020, 1, 1, tzinfo=UTC),
        "action": "update",
        "actor": "admin",
        "actor_id": None,
        "request_id": "",
        "source_ip": None,
        "object_type": "tier",
        "object_id": "1",
        "object_repr": "Gold",
        "before": None,
        "after": {"rate": 1000},
        "reason": "approved",
        "prev_hash": prev_hash,
        "key_id": key_id,
    }


def _insert(conn, row: dict, digest: str) -> None:
    conn.execute(
        "INSERT INTO limits_auditentry (created_at, action, actor, actor_id, request_id,"
        " source_ip, object_type, object_id, object_repr, before, after, reason,"
        " prev_hash, key_id, hash) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s,"
        " %s, %s, %s, %s, %s)",
        [
            *[row[k] for k in list(row)[:9]],
            None,
            json.dumps(row["after"]),
            row["reason"],
            row["prev_hash"],
            row["key_id"],
            digest,
        ],
    )


def test_runtime_role__forged_append__refused_or_named_by_audit_verify(roles):
    # Given a recorded change
    rules.rule_save(obj=Tier(slug="gold", name="Gold"), actor=Actor.system())
    head, kid = chain_head(), audit_keys()[0].kid
    # When the runtime role appends the forged entry the old way (plain
    # SHA-256 of its fields, linked to the head)
    unkeyed = _forged_entry(head, "")
    with psycopg.connect(roles["runtime_url"], autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as refused:
            _insert(conn, unkeyed, entry_digest(unkeyed))
        # and then with the key's id and a hash under a key it guessed
        keyed = _forged_entry(head, kid)
        guess = AuditKey(kid, b"a guess at the application's key")
        _insert(conn, keyed, entry_digest(keyed, guess))
    # Then the database refused the first, and audit_verify names the second
    assert "key_id is required" in str(refused.value)
    forged = AuditEntry.objects.get(actor="admin")
    with pytest.raises(CommandError) as failed:
        call_command("audit_verify", stdout=StringIO())
    assert (
        f"audit chain broken at entry {forged.pk}: its content does not match"
        in str(failed.value)
    )
