"""The audit log's hash chain: each entry carries a keyed hash of its own content and
of the entry before it, so that an edited, removed or inserted entry breaks every
link after it, and an entry appended by anyone without the key does not verify.

The digest covers who (actor and actor id), when (created_at, to the microsecond, in
UTC), from where (request id, source address), what (action, object type, id and
name), the change (before and after) and why (reason), plus the previous entry's
hash and the key's id, as canonical JSON: keys sorted, no spaces, UTF-8. It is an
HMAC-SHA256 under the application's audit key (``limits.core.auditkeys``), which the
database does not hold. Entries written before keys existed (``key_id`` empty)
carry a plain SHA-256 of the same fields without ``key_id``; they are accepted only
before the first keyed entry (migration ``audit_keyed_chain`` sealed them with one),
so a plain-SHA-256 entry appended later is refused. Nothing here needs the database
but :func:`chain_lock`, :func:`chain_head` and the walk of all entries.

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
import hmac
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from django.db import connection

from limits.core.auditkeys import AuditKey, audit_keys
from limits.models import AuditEntry

__all__ = [
    "CHAIN_LOCK",
    "GENESIS",
    "ChainState",
    "chain_head",
    "chain_lock",
    "chain_verify",
    "entry_digest",
    "entry_seal",
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


def entry_digest(entry: Mapping[str, Any] | Any, key: AuditKey | None = None) -> str:
    """The hash (hex) of an entry's chained fields, from a mapping or an object:
    HMAC-SHA256 under ``key`` (whose id is then covered too), or the plain SHA-256
    of an entry written before keys existed."""
    get = entry.get if isinstance(entry, Mapping) else lambda name: getattr(entry, name)
    document = {name: get(name) for name in CHAINED_FIELDS}
    document["created_at"] = _utc(document["created_at"])
    if key is not None:
        document["key_id"] = key.kid
    canonical = json.dumps(
        document, sort_keys=True, separators=(",", ":"), ensure_ascii=False
    ).encode("utf-8")
    if key is None:
        return hashlib.sha256(canonical).hexdigest()
    return hmac.new(key.secret, canonical, hashlib.sha256).hexdigest()


def entry_seal(entry: AuditEntry) -> None:
    """Key ``entry`` (its ``prev_hash`` set) with the current audit key."""
    key = audit_keys()[0]
    entry.key_id = key.kid
    entry.hash = entry_digest(entry, key)


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
    legacy: int = 0  #: entries from before keys existed (plain SHA-256), sealed

    @property
    def intact(self) -> bool:
        return self.broken_id is None


def chain_verify(
    entries: Iterable[Mapping[str, Any]] | None = None,
    *,
    keys: Sequence[AuditKey] | None = None,
    marks: Mapping[int, tuple[int, str]] | None = None,
) -> ChainState:
    """Walk ``entries`` (all of the log, oldest first, by default) and stop at the
    first whose previous hash is not its predecessor's hash, or whose own hash is
    not the keyed digest of its content under one of ``keys`` (the configured
    ones by default).

    ``marks``: checkpoints, ``{entry id: (entries up to it, its hash)}``; the walk
    must pass each one with that count and hash, or the log was cut off or
    rewritten since.
    """
    rows = _all_entries() if entries is None else entries
    by_id = {key.kid: key for key in (audit_keys() if keys is None else keys)}
    pending = dict(marks or {})
    verified, legacy, last_id, expected = 0, 0, None, GENESIS
    for row in rows:
        problem = _problem(row, expected, by_id, keyed=verified > legacy)
        mark = pending.pop(row["id"], None)
        if not problem and mark is not None and mark != (verified + 1, row["hash"]):
            problem = "it is not the entry a checkpoint saw here (count or hash differ)"
        if problem:
            return ChainState(verified, last_id, expected, row["id"], problem, legacy)
        legacy += not row.get("key_id")
        verified, last_id, expected = verified + 1, row["id"], row["hash"]
    if pending:
        missing = min(pending)
        problem = (
            f"a checkpoint saw entry {missing} (of {pending[missing][0]} entries), "
            "which the log no longer reaches: entries were cut off"
        )
        return ChainState(verified, last_id, expected, missing, problem, legacy)
    return ChainState(verified, last_id, expected, legacy=legacy)


def _problem(
    row: Mapping[str, Any], expected: str, keys: Mapping[str, AuditKey], *, keyed: bool
) -> str:
    """Why ``row`` does not belong after an entry of hash ``expected``; "" if it does."""
    if row["prev_hash"] != expected:
        return "its previous hash is not the hash of the entry before it"
    kid = row.get("key_id") or ""
    if not kid:
        if keyed:
            return "it carries no key although keyed entries precede it: not written by Sluice"
        return (
            ""
            if entry_digest(row) == row["hash"]
            else "its content does not match its hash"
        )
    key = keys.get(kid)
    if key is None:
        return f"it is keyed with {kid!r}, which is not a configured audit key"
    if key.until is not None and row["id"] > key.until:
        return f"it is keyed with {kid!r}, retired after entry {key.until}"
    if not hmac.compare_digest(entry_digest(row, key), row["hash"]):
        return "its content does not match its keyed hash: edited, or not written by Sluice"
    return ""


def _all_entries() -> Iterable[Mapping[str, Any]]:
    fields = ("id", "hash", "key_id", *CHAINED_FIELDS)
    return AuditEntry.objects.order_by("id").values(*fields).iterator(chunk_size=2000)
