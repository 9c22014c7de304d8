"""Migration ``audit_keyed_chain``: the unkeyed history is verified, kept, and sealed."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
from django.core.management import call_command
from django.db import connection

from limits.core.chain import GENESIS, chain_verify, entry_digest
from limits.core.checkpoints import checkpoints_read
from limits.models import AuditEntry

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE, AFTER = "0016_gateway_timeout_outcome", "0017_audit_keyed_chain"


def _insert_unkeyed(count: int) -> list[str]:
    """``count`` entries chained the way Sluice chained them before keys; their hashes."""
    hashes, previous = [], GENESIS
    with connection.cursor() as cursor:
        for n in range(count):
            row = {
                "created_at": datetime(2025, 1, 1, 12, n, tzinfo=UTC),
                "action": "update",
                "actor": "alice",
                "actor_id": None,
                "request_id": f"req-{n}",
                "source_ip": None,
                "object_type": "tier",
                "object_id": str(n),
                "object_repr": f"tier {n}",
                "before": None,
                "after": {"rate": n},
                "reason": "before keys",
                "prev_hash": previous,
            }
            previous = entry_digest(row)
            cursor.execute(
                "INSERT INTO limits_auditentry (created_at, action, actor, actor_id,"
                " request_id, source_ip, object_type, object_id, object_repr, before,"
                " after, reason, prev_hash, hash) VALUES (%s, %s, %s, %s, %s, %s, %s,"
                " %s, %s, %s, %s, %s, %s, %s)",
                [
                    *[row[k] for k in list(row)[:9]],
                    None,
                    json.dumps(row["after"]),
                    row["reason"],
                    row["prev_hash"],
                    previous,
                ],
            )
            hashes.append(previous)
    return hashes


@pytest.fixture
def before_keys():
    call_command("migrate", "limits", BEFORE, verbosity=0)
    yield
    call_command("migrate", verbosity=0)


def test_migrate__unkeyed_history__verified_kept_and_sealed_by_a_checkpoint(
    before_keys, settings, tmp_path
):
    # Given three entries written before the chain was keyed
    settings.SLUICE_AUDIT_CHECKPOINT_FILE = str(tmp_path / "checkpoints.jsonl")
    hashes = _insert_unkeyed(3)
    # When the migration runs
    call_command("migrate", "limits", AFTER, verbosity=0)
    # Then the old entries are untouched, one keyed seal follows them, the whole
    # chain verifies, and a signed checkpoint of the seal was written out
    entries = list(AuditEntry.objects.order_by("id"))
    assert [e.hash for e in entries[:3]] == hashes
    seal = entries[3]
    assert (seal.action, seal.prev_hash, seal.after) == (
        "seal",
        hashes[-1],
        {"entries": 3, "head": hashes[-1]},
    )
    assert seal.key_id
    state = chain_verify()
    assert (state.intact, state.verified, state.legacy) == (True, 4, 3)
    (checkpoint,) = checkpoints_read(tmp_path / "checkpoints.jsonl")
    assert (checkpoint.entry, checkpoint.count, checkpoint.head) == (
        seal.pk,
        4,
        seal.hash,
    )


def test_migrate__broken_unkeyed_history__stops_naming_the_entry(before_keys):
    # Given old entries, one of them edited behind the triggers
    _insert_unkeyed(3)
    with connection.cursor() as cursor:
        cursor.execute("ALTER TABLE limits_auditentry DISABLE TRIGGER USER")
        cursor.execute(
            "UPDATE limits_auditentry SET reason = 'rewritten' WHERE object_id = '1'"
        )
        cursor.execute("ALTER TABLE limits_auditentry ENABLE TRIGGER USER")
    # When the migration runs / Then it stops, naming what is broken, and seals nothing
    with pytest.raises(RuntimeError, match="audit chain broken at entry"):
        call_command("migrate", "limits", AFTER, verbosity=0)
    assert not AuditEntry.objects.filter(action="seal").exists()
    with connection.cursor() as cursor:  # so that the next migrate can seal the log
        cursor.execute("SET session_replication_role = replica")
        cursor.execute("DELETE FROM limits_auditentry")
        cursor.execute("SET session_replication_role = origin")
