"""Rules files of a real platform's size: one error stops 100,000 tenants before any
write, an apply killed halfway leaves nothing, and a large change is audited and
told in few words."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import timedelta
from io import StringIO

import psycopg
import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from limits.ascode.services import rules_export, rules_file_diff, rules_file_read
from limits.changes.services import edits_digest
from limits.core.audit import Actor
from limits.models import AuditEntry, ChangeRequest, Limit, Snapshot, Tenant
from limits.publishing.services import snapshot_publish
from tests.celery_fixtures import broker_url, database_url
from tests.limits.ascode.test_rules_file import ROOT

SYSTEM = Actor.system("test")


@pytest.fixture
def active(rules, settings):
    settings.SLUICE_NOTICE_PERIOD_DAYS = 0
    return snapshot_publish(actor=SYSTEM, message="v1")


def with_new_tenants(text: str, count: int, *, tier: str = "free") -> str:
    """The exported ``text`` with ``count`` tenants more (slugs after the others')."""
    added = "".join(
        f"  zz{index:06d}:\n    name: New {index}\n    tier: {tier}\n"
        for index in range(count)
    )
    return text.replace("\nroutes:\n", f"\n{added}routes:\n", 1)


def counts() -> dict[str, int]:
    return {
        "tenants": Tenant.objects.count(),
        "requests": ChangeRequest.objects.count(),
        "versions": Snapshot.objects.count(),
        "audit": AuditEntry.objects.count(),
    }


def test_apply__100k_tenants_one_error__names_its_line_and_writes_nothing(
    active, tmp_path
):
    # Given a file of 100,000 new tenants, one of them on a tier that does not exist
    text = with_new_tenants(rules_export(), 100_000)
    text = text.replace(
        "  zz054321:\n    name: New 54321\n    tier: free\n",
        "  zz054321:\n    name: New 54321\n    tier: gold\n",
    )
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    before = counts()
    # When an operator applies it
    with pytest.raises(CommandError) as refused:
        call_command("rules", "apply", str(path), "--publish")
    # Then the error names the file, the line and the member, and nothing was written
    said = str(refused.value)
    assert said.startswith("rules.yaml:"), said
    line = int(said.split(":")[1])
    assert text.splitlines()[line - 1] == "    tier: gold"
    assert "tenants.zz054321.tier: unknown tier 'gold'" in said
    assert counts() == before


def test_apply__many_new_tenants__one_request_entry_with_the_digest_of_its_edits(
    active, tmp_path
):
    # Given a file that adds 300 tenants and renames one that exists
    text = with_new_tenants(rules_export(), 300)
    text = text.replace("    name: Initech\n", "    name: Initech Inc\n")
    path = tmp_path / "rules.yaml"
    path.write_text(text)
    tenants_audited = AuditEntry.objects.filter(object_type="tenant").count()
    # When it is applied and published
    call_command("rules", "apply", str(path), "--publish", stdout=StringIO())
    # Then the request's entries carry the count and the digest of its 301 edits,
    # which the stored edits match, rather than the edits themselves
    request = ChangeRequest.objects.get()
    stored = [
        {"subject": e.subject, "key": e.key, "before": e.before, "after": e.after}
        for e in request.edits.order_by("id")
    ]
    created = AuditEntry.objects.get(object_type="changerequest", action="create")
    assert created.after["edits_count"] == len(stored) == 301
    assert created.after["edits_digest"] == edits_digest(stored)
    assert "edits" not in created.after
    # And only the tenant that existed has an entry of its own
    assert Tenant.objects.filter(slug__startswith="zz").count() == 300
    entries = AuditEntry.objects.filter(object_type="tenant")
    assert entries.count() == tenants_audited + 1
    assert entries.order_by("-id").first().after["slug"] == "initech"


def test_diff__large_change__counts_per_kind_and_the_first_changes(active, tmp_path):
    # Given a file adding 120 tenants
    found = rules_file_diff(rules_file_read(with_new_tenants(rules_export(), 120)))
    # When it is told in words
    short, full = found.text(), found.text(limit=None)
    # Then the summary counts them and shows the first 50; the full text has them all
    assert "120 object(s) change (120 new)" in short
    assert short.count("new tenant zz") == 50
    assert "... and 70 more: the first 50 are shown" in short
    assert full.count("new tenant zz") == 120
    assert found.counts() == {"new": 120}
    # And the command writes every change to a file on request
    path, listing = tmp_path / "rules.yaml", tmp_path / "changes.txt"
    path.write_text(with_new_tenants(rules_export(), 120))
    with pytest.raises(SystemExit):
        call_command(
            "rules",
            "diff",
            str(path),
            "--changes-file",
            str(listing),
            stdout=StringIO(),
            stderr=StringIO(),
        )
    assert listing.read_text() == full


def _writing_pid(url: str, own: int) -> int | None:
    """The backend of another session holding a write lock on the tenants table:
    an apply that has started writing its rows."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT l.pid FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
            "WHERE c.relname = 'limits_tenant' AND l.mode = 'RowExclusiveLock' "
            "AND l.granted AND l.pid <> %s",
            (own,),
        ).fetchone()
    return row[0] if row else None


def _backend_gone(url: str, pid: int) -> bool:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)
        ).fetchone()
    return row is None


@pytest.mark.django_db(transaction=True)
def test_apply__killed_with_sigkill_while_writing__database_as_it_was(
    rules, settings, tmp_path, redis_server
):
    # Given published rules and a file adding 40,000 tenants
    settings.SLUICE_NOTICE_PERIOD_DAYS = 0
    snapshot_publish(actor=SYSTEM, message="v1")
    path = tmp_path / "rules.yaml"
    path.write_text(with_new_tenants(rules_export(), 40_000))
    before = counts()
    url = database_url()
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "REDIS_URL": redis_server.url,
        "CELERY_BROKER_URL": broker_url(redis_server),
        "DJANGO_SETTINGS_MODULE": "controlplane.settings",
        "SLUICE_NOTICE_PERIOD_DAYS": "0",
    }
    # When `rules apply --publish` runs and is killed (-9) once it writes tenants
    apply = subprocess.Popen(
        [sys.executable, "manage.py", "rules", "apply", str(path), "--publish"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    with psycopg.connect(url, autocommit=True) as conn:
        own = conn.info.backend_pid
    deadline, backend = time.monotonic() + 300, None
    while backend is None and apply.poll() is None and time.monotonic() < deadline:
        backend = _writing_pid(url, own)
        time.sleep(0.01)
    assert backend is not None, (apply.returncode, apply.stderr.read()[-2000:])
    os.kill(apply.pid, signal.SIGKILL)
    apply.wait(timeout=60)
    # Then once Postgres has ended its session, nothing of the apply is there
    deadline = time.monotonic() + 120
    while not _backend_gone(url, backend) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert apply.returncode == -signal.SIGKILL
    assert counts() == before


def test_diff__scheduled_version__shown_with_the_file_s_conflicts(active, rules):
    # Given a version scheduled for tomorrow that lowers the pro tier on search
    limit = Limit.objects.get(policy__tier=rules["pro"], policy__route=rules["search"])
    limit.rate, limit.burst = 40, 80
    limit.save()
    scheduled = snapshot_publish(
        actor=SYSTEM,
        message="pro search lowered",
        effective_at=timezone.now() + timedelta(days=1),
    )
    exported = rules_export()  # the active version: pro search still at 50
    # When a file raises the same limit, and another renames a tenant only
    raised = exported.replace(
        "rate: 50, period: second, burst: 100", "rate: 60, period: second, burst: 120"
    )
    renamed = exported.replace("    name: Initech\n", "    name: Initech Inc\n")
    both = rules_file_diff(rules_file_read(raised))
    other = rules_file_diff(rules_file_read(renamed))
    # Then both diffs show the scheduled version, and only the first a conflict
    (pending,) = both.pending
    assert pending.version == scheduled.version
    assert len(pending.conflicts) == 1
    assert f"Version {scheduled.version} is scheduled for" in both.text()
    assert "the file conflicts with it" in both.text()
    assert "pro search lowered" in both.text()
    assert other.pending[0].conflicts == ()
    assert "the file changes none of what it changes" in other.text()
