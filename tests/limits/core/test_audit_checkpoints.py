"""The keyed audit chain and its signed checkpoints: what someone with only the
database cannot do unseen (add an entry, cut the log short)."""

from __future__ import annotations

import base64
import json
import logging
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from limits.choices import AuditAction
from limits.core.audit import Actor, audit_record
from limits.core.auditkeys import AuditKey, audit_keys, parse_audit_keys
from limits.core.chain import chain_verify
from limits.core.checkpoints import CheckpointError, checkpoint_take, checkpoints_read
from limits.core.tasks import audit_checkpoint_task
from limits.models import AuditEntry

pytestmark = pytest.mark.django_db


def _record(n: int) -> AuditEntry:
    return audit_record(
        actor=Actor(name="test", request_id=f"req-{n}"),
        action=AuditAction.UPDATE,
        object_type="tier",
        object_id=str(n),
        object_repr=f"tier {n}",
        after={"rate": n},
        reason=f"change {n}",
    )


def _verify(*args: str) -> str:
    out = StringIO()
    call_command("audit_verify", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def checkpoint_file(settings, tmp_path):
    path = tmp_path / "checkpoints.jsonl"
    settings.SLUICE_AUDIT_CHECKPOINT_FILE = str(path)
    return path


def _cut_after(entry_id: int) -> None:
    """What an owner of the database can do: remove the newest entries behind the triggers."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute("DELETE FROM limits_auditentry WHERE id > %s", [entry_id])
        cursor.execute("SET LOCAL session_replication_role = origin")


def test_audit_verify__checkpoint_then_the_tail_cut_off__names_the_missing_entry(
    checkpoint_file,
):
    # Given five entries and a checkpoint of the head written out of the database
    entries = [_record(n) for n in range(5)]
    call_command("audit_checkpoint", stdout=StringIO())
    # When the last two entries are removed (the chain of the first three is intact)
    _cut_after(entries[2].pk)
    assert chain_verify().intact  # without the checkpoint, nothing shows
    # Then audit_verify with the checkpoint says the log was cut off
    with pytest.raises(CommandError) as failed:
        _verify("--checkpoint", str(checkpoint_file))
    assert f"a checkpoint saw entry {entries[4].pk} (of 5 entries)" in str(failed.value)
    assert "cut off" in str(failed.value)


def test_audit_verify__checkpoint_then_more_entries__intact_and_counts_them(
    checkpoint_file,
):
    # Given three entries, a checkpoint, then two more entries
    for n in range(3):
        _record(n)
    call_command("audit_checkpoint", stdout=StringIO())
    for n in range(3, 5):
        _record(n)
    # When audit_verify checks the log against the checkpoint / Then it holds
    said = _verify("--checkpoint", str(checkpoint_file))
    assert "audit chain intact: 5 entries verified" in said
    assert "1 checkpoints reached" in said
    assert "2 entries appended since, each keyed by the application" in said


def test_audit_verify__checkpoint_edited__refused(checkpoint_file):
    # Given a checkpoint, then the file edited to claim fewer entries
    for n in range(3):
        _record(n)
    call_command("audit_checkpoint", stdout=StringIO())
    line = json.loads(checkpoint_file.read_text())
    line["count"] = 2
    checkpoint_file.write_text(json.dumps(line) + "\n")
    # When audit_verify reads it / Then the file is refused, naming the line
    with pytest.raises(
        CommandError, match=r"checkpoints.jsonl:1: not a checkpoint signed"
    ):
        _verify("--checkpoint", str(checkpoint_file))


def test_checkpoint__every_n_entries__written_on_commit(
    settings, checkpoint_file, django_capture_on_commit_callbacks
):
    # Given checkpoints every 2 entries (by id)
    settings.SLUICE_AUDIT_CHECKPOINT_EVERY = 2
    # When five entries are committed
    with django_capture_on_commit_callbacks(execute=True):
        entries = [_record(n) for n in range(5)]
    # Then one checkpoint per even id, each signed, each at an entry of the log
    checkpoints = checkpoints_read(checkpoint_file)
    even = [e.pk for e in entries if e.pk % 2 == 0]
    assert len(checkpoints) == len(even)
    assert {c.head for c in checkpoints} <= {e.hash for e in entries}


def test_chain__entry_keyed_by_a_retired_key_after_its_last__refused():
    # Given entries keyed by the current key
    entries = [_record(n) for n in range(3)]
    current = audit_keys()[0]
    # When that key is retired after the first entry (a new key in front)
    rotated = (
        AuditKey("next", b"n" * 32),
        AuditKey(current.kid, current.secret, entries[0].pk),
    )
    state = chain_verify(keys=rotated)
    # Then the entries it keyed after that are refused
    assert state.broken_id == entries[1].pk
    assert "retired after entry" in state.problem


def test_chain__rotation_overlap__entries_of_both_keys_verify(settings):
    # Given entries keyed by the old key, then by a new one listed first
    old = audit_keys()[0]
    _record(0)
    settings.SLUICE_AUDIT_KEYS = (
        "new-1:"
        + "bmV3LWtleS1mb3ItdGhlLWF1ZGl0LWNoYWlu"
        + f",{old.kid}:"
        + base64.b64encode(old.secret).decode()
    )
    _record(1)
    # Then the whole chain verifies with both keys listed, and the newest is new-1's
    assert chain_verify().intact
    assert AuditEntry.objects.order_by("-id").first().key_id == "new-1"


@pytest.mark.parametrize(
    "text",
    ["nokey", "k1:c2hvcnQ=", "k 1:" + "a" * 24, "k1:" + "a" * 24 + ":x"],
)
def test_parse_audit_keys__bad_entry__refused(text):
    with pytest.raises(ValueError, match="audit key 1"):
        parse_audit_keys(text)


def test_checkpoint_take__empty_log__none():
    assert checkpoint_take() is None


def test_checkpoints_read__unknown_key__refused(checkpoint_file):
    _record(0)
    call_command("audit_checkpoint", stdout=StringIO())
    line = json.loads(checkpoint_file.read_text())
    line["kid"] = "k-0000000000000000"
    checkpoint_file.write_text(json.dumps(line) + "\n")
    with pytest.raises(CheckpointError, match="unknown key"):
        checkpoints_read(checkpoint_file)


def test_audit_checkpoint_task__beat__writes_the_file_and_a_log_line(
    checkpoint_file, caplog
):
    # Given two entries
    entries = [_record(n) for n in range(2)]
    # When beat's periodic task runs
    with caplog.at_level(logging.INFO, logger="sluice.audit"):
        seen = audit_checkpoint_task()
    # Then a signed checkpoint of the head is in the file, and on the log for a shipper
    (checkpoint,) = checkpoints_read(checkpoint_file)
    assert seen == checkpoint.entry == entries[-1].pk
    assert (checkpoint.count, checkpoint.head) == (2, entries[-1].hash)
    logged = [r.getMessage() for r in caplog.records if "audit.checkpoint" in r.msg]
    assert logged == [f"audit.checkpoint: {checkpoint.to_line()}"]
