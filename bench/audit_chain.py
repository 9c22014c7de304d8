"""The audit log's hash chain: what appending costs, alone and with writers racing,
and how long verifying the whole chain takes (``audit_verify``, the admin list).

Runs in a Django process on the bench database (``bench/run.py`` sets it up; alone:
``DJANGO_SETTINGS_MODULE=bench.settings DATABASE_URL=..._bench REDIS_URL=<a private
redis> python -m bench.audit_chain``). Prints Markdown.
"""

from __future__ import annotations

import argparse
import threading
import time

import django

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402

from bench.common import machine_line, table  # noqa: E402
from limits.choices import AuditAction  # noqa: E402
from limits.core.audit import Actor, audit_record  # noqa: E402
from limits.core.chain import chain_verify  # noqa: E402
from limits.models import AuditEntry  # noqa: E402

#: A policy's before and after, the size of a typical rule change's entry.
STATE = {
    "scope": "tier",
    "tier": "free",
    "route": None,
    "limits": [
        {"dimension": "tenant", "rate": 5, "period": 1, "burst": 10, "shards": 1},
        {"dimension": "user", "rate": 2, "period": 1, "burst": 5, "shards": 1},
    ],
}


def append(count: int, writer: str) -> None:
    for n in range(count):
        with transaction.atomic():
            audit_record(
                actor=Actor.system(writer),
                action=AuditAction.UPDATE,
                object_type="policy",
                object_id=str(n),
                object_repr=f"policy {n}",
                before=STATE,
                after={**STATE, "revision": n},
            )
    connection.close()


def plain_inserts(count: int) -> float:
    """Entries per second written without the chain (no lock, no head read, no
    digest): what the chain adds is the difference. Removed afterwards."""
    began = time.perf_counter()
    for n in range(count):
        with transaction.atomic():
            AuditEntry.objects.create(
                action=AuditAction.UPDATE,
                actor="bench-plain",
                object_type="policy",
                object_id=str(n),
                object_repr=f"policy {n}",
                before=STATE,
                after={**STATE, "revision": n},
                prev_hash=f"plain-{n}",
                hash=f"plain-{n}",
                key_id="bench-plain",  # the database refuses an entry without one
            )
    rate = count / (time.perf_counter() - began)
    with connection.cursor() as cursor:  # the bench's superuser, triggers held off
        cursor.execute("SET session_replication_role = replica")
        cursor.execute("DELETE FROM limits_auditentry WHERE actor = 'bench-plain'")
        cursor.execute("SET session_replication_role = origin")
    return rate


def appends(count: int, writers: int) -> float:
    """Entries per second with ``writers`` threads appending ``count`` each."""
    threads = [
        threading.Thread(target=append, args=(count, f"bench-{w}"))
        for w in range(writers)
    ]
    began = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return count * writers / (time.perf_counter() - began)


def verify_seconds() -> tuple[float, int]:
    began = time.perf_counter()
    state = chain_verify()
    assert state.intact, state
    return time.perf_counter() - began, state.verified


def admin_list_seconds() -> float:
    user, _ = get_user_model().objects.get_or_create(
        username="bench-auditor", defaults={"is_staff": True, "is_superuser": True}
    )
    client = Client(SERVER_NAME="localhost")
    client.force_login(user)
    began = time.perf_counter()
    response = client.get("/admin/limits/auditentry/")
    assert response.status_code == 200
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--entries", type=int, default=20000)
    options = parser.parse_args()
    rows = []
    plain = plain_inserts(1000)
    single = appends(1000, 1)
    racing = appends(500, 4)
    rows.append(
        ("plain insert without the chain, 1 writer (entries/s)", f"{plain:.0f}")
    )
    rows.append(("append, 1 writer (entries/s)", f"{single:.0f}"))
    rows.append(("append, 4 writers at once (entries/s)", f"{racing:.0f}"))
    remaining = options.entries - AuditEntry.objects.count()
    if remaining > 0:
        append(remaining, "bench-fill")
    seconds, verified = verify_seconds()
    rows.append((f"audit_verify, {verified} entries (s)", f"{seconds:.2f}"))
    rows.append(("verified entries/s", f"{verified / seconds:.0f}"))
    rows.append(
        (f"admin audit list with {verified} entries (s)", f"{admin_list_seconds():.2f}")
    )
    print("## Audit chain (issue 17)\n")
    print(f"{machine_line()}.\n")
    print(table(("measure", "value"), rows))


if __name__ == "__main__":
    main()
