"""The audit log's hash chain: each entry carries the SHA-256 of its own content and
of the entry before it, so that an edited, removed or inserted entry breaks every
link after it.

The digest covers who (actor and actor id), when (created_at, to the microsecond, in
UTC), from where (request id, source address), what (action, object type, id and
name), the change (before and after) and why (reason), plus the previous entry's
hash, as canonical JSON: keys sorted, no spaces, UTF-8. Anyone holding an export of
the log can recompute it; nothing here needs the database but :func:`chain_lock`
and :func:`chain_head`.

Appends are serialized by a transaction-level advisory lock (held until the
transaction that appends commits), so two concurrent writers cannot both link to
the same entry; a unique index on ``prev_hash`` refuses such a fork anyway.

Lock order: a transaction that will audit takes this lock before any other (row
locks, the publishing lock and its table locks), so that no writer holds the chain
while it waits for a lock another writer holds while waiting for the chain. A
publish holds the rule tables in SHARE mode; an edit that took the chain first
simply waits for the publish to finish, or the publish waits for it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connection

from limits.models import AuditEntry

__all__ = [
    "CHAIN_LOCK",
    "GENESIS",
    "ChainState",
    "chain_head",
    "chain_lock",
    "chain_verify",
    "entry_digest",
]

#: The previous hash of the first entry.
GENESIS = "0" * 64

#: Key of the advisory lock that serializes appends ("sluiceAU" as a 64-bit number;
#: advisory locks are per database, so other databases on the cluster do not share it).
CHAIN_LOCK = int.from_bytes(b"sluiceAU", "big") - (1 << 63)

#: The fields the digest covers, as :func:`entry_digest` reads them.
CHAINED_FIELDS = (
    "created_at",
    "action",
    "actor",
    "actor_id",
    "request_id",
    "source_ip",
    "object_type",
    "object_id",
    "object_repr",
    "before",
    "after",
    "reason",
    "prev_hash",
)


def entry_digest(entry: Mapping[str, Any] | Any) -> str:
    """The SHA-256 (hex) of an entry's chained fields, from a mapping or an object."""
    get = entry.get if isinstance(entry, Mapping) else lambda name: getattr(entry, name)
    document = {name: get(name) for name in CHAINED_FIELDS}
    document["created_at"] = _utc(document["created_at"])
    canonical = json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _utc(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def chain_lock() -> None:
    """Hold the append lock until the current transaction ends (call it inside one).

    Taken before any row lock of an audited write (``limits.core.audit.row_lock``),
    so every writer takes the locks in the same order and none waits for another
    in a circle.
    """
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", [CHAIN_LOCK])


def chain_head() -> str:
    """The hash of the last entry (GENESIS for an empty log); call it under the lock."""
    last = AuditEntry.objects.order_by("-id").values_list("hash", flat=True).first()
    return last or GENESIS


@dataclass(frozen=True, slots=True)
class ChainState:
    """What walking the chain found."""

    verified: int  #: entries that matched, from the first one
    last_verified_id: int | None  #: the id of the last entry that matched
    head: str  #: the hash of the last entry that matched (GENESIS if none did)
    broken_id: int | None = None  #: the first entry that does not match, if any
    problem: str = ""  #: why it does not match

    @property
    def intact(self) -> bool:
        return self.broken_id is None


def chain_verify(entries: Iterable[Mapping[str, Any]] | None = None) -> ChainState:
    """Walk ``entries`` (all of the log, oldest first, by default) and stop at the
    first whose previous hash is not its predecessor's hash or whose own hash is
    not the digest of its content."""
    rows = _all_entries() if entries is None else entries
    verified, last_id, expected = 0, None, GENESIS
    for row in rows:
        problem = ""
        if row["prev_hash"] != expected:
            problem = "its previous hash is not the hash of the entry before it"
        elif entry_digest(row) != row["hash"]:
            problem = "its content does not match its hash"
        if problem:
            return ChainState(verified, last_id, expected, row["id"], problem)
        verified, last_id, expected = verified + 1, row["id"], row["hash"]
    return ChainState(verified, last_id, expected)


def _all_entries() -> Iterable[Mapping[str, Any]]:
    fields = ("id", "hash", *CHAINED_FIELDS)
    return AuditEntry.objects.order_by("id").values(*fields).iterator(chunk_size=2000)
