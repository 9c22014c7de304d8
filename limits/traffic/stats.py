"""Roll the decision stream up into Postgres, and prune what is old.

Gateways write batches of decision events to a Redis stream
(``sluice.metrics``). :func:`decision_stream_aggregate` reads it
through a consumer group and, one batch of entries per transaction, counts
events per minute x tenant x route x outcome, adds them to the lifetime
counters, and keeps the newest rejections of each tenant. Entries are
acknowledged (XACK) only after that transaction committed.

Why nothing is counted twice or lost (``docs/stats.md``): the transaction that
counts an entry also records its id in ``StreamEntry`` (``INSERT ... ON
CONFLICT DO NOTHING RETURNING``), and only the ids it inserted are counted. A
run killed after its commit and before its XACK leaves the entries pending; the
next run reads pending entries first, finds their ids recorded, counts nothing
and acknowledges them. A run killed before its commit counted nothing; its
entries stay pending and are counted by the next run. Two runs at once may read
the same pending entries: the second one's insert waits on the first's
unique-index lock and then finds the ids taken. The only loss is an entry trimmed
from the stream (``MAXLEN ~``) before any run read it; it is counted as lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import redis
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from limits.core.store import redis_client
from limits.gateways.keys import DECISION_GROUP, decision_stream
from limits.models import (
    DecisionHour,
    DecisionMinute,
    DecisionPeak,
    RehearsalMinute,
    Rejection,
    StreamEntry,
)
from limits.traffic.tally import Tally, entry_ms

__all__ = [
    "CONSUMER",
    "GROUP",
    "Rollup",
    "decision_stream_aggregate",
    "stats_apply",
    "stats_prune",
]

GROUP = DECISION_GROUP
#: One consumer name for every run: a new run re-reads what a dead one left pending.
CONSUMER = "aggregator"


@dataclass
class Rollup:
    """What one run did."""

    entries: int = 0  #: stream entries read
    counted: int = 0  #: entries counted by this run
    skipped: int = 0  #: entries already counted by an earlier run
    events: int = 0  #: decision events counted
    lost: int = 0  #: entries trimmed from the stream before they were counted

    def add(self, other: Rollup) -> None:
        self.entries += other.entries
        self.counted += other.counted
        self.skipped += other.skipped
        self.events += other.events
        self.lost += other.lost


def decision_stream_aggregate(*, batch: int = 200, max_entries: int = 20_000) -> Rollup:
    """Count what the stream holds beyond the group's position; safe to run twice, even at once.

    Pending entries (read by a run that did not acknowledge them) first, then
    new ones, ``batch`` entries per transaction, at most ``max_entries`` per run.
    """
    client, stream = redis_client(), decision_stream()
    _group_ensure(client, stream)
    total = Rollup()
    for start in ("0", ">"):
        while total.entries < max_entries:
            entries = _read(client, stream, start, batch)
            if not entries:
                break
            total.add(stats_apply(entries=entries))
            client.xack(stream, GROUP, *(entry_id for entry_id, _ in entries))
    return total


def _group_ensure(client: redis.Redis, stream: str) -> None:
    try:  # from the start of the stream: events written before the group count too
        client.xgroup_create(stream, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def _read(
    client: redis.Redis, stream: str, start: str, count: int
) -> list[tuple[str, dict]]:
    reply = client.xreadgroup(GROUP, CONSUMER, {stream: start}, count=count)
    if not reply:
        return []
    return [(_text(entry_id), fields) for entry_id, fields in reply[0][1]]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@transaction.atomic
def stats_apply(*, entries: list[tuple[str, dict]]) -> Rollup:
    """Count ``entries`` (id, fields) whose ids were never counted, in one transaction."""
    fresh = _ledger_claim([entry_id for entry_id, _ in entries])
    tally = Tally(per_tenant=settings.SLUICE_STATS_REJECTIONS_PER_TENANT)
    for entry_id, fields in entries:
        if entry_id in fresh:
            tally.add_entry(fields)
    tally.save()
    return Rollup(
        entries=len(entries),
        counted=len(fresh),
        skipped=len(entries) - len(fresh),
        events=tally.events,
        lost=tally.lost,
    )


def _ledger_claim(entry_ids: list[str]) -> set[str]:
    """Record the ids; return those recorded now (the others were counted before)."""
    table = StreamEntry._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {table} (entry_id, entry_ms, processed_at) "
            "SELECT id, ms, now() FROM unnest(%s::text[], %s::bigint[]) AS t(id, ms) "
            "ON CONFLICT (entry_id) DO NOTHING RETURNING entry_id",
            [entry_ids, [entry_ms(entry_id) for entry_id in entry_ids]],
        )
        return {row[0] for row in cursor.fetchall()}


def stats_prune(*, now=None) -> dict[str, int]:
    """Delete counts (per minute, per second and rehearsals'), rejections and ledger
    rows older than their retention settings.

    Ledger rows of entries still pending in the stream are kept whatever their
    age: they are what keeps a pending entry from being counted twice.
    """
    now = now or timezone.now()
    days = timedelta(days=1)
    kept_from = now - settings.SLUICE_STATS_RETENTION_DAYS * days
    minutes = DecisionMinute.objects.filter(minute__lt=kept_from).delete()[0]
    peaks = DecisionPeak.objects.filter(minute__lt=kept_from).delete()[0]
    hours = DecisionHour.objects.filter(hour__lt=kept_from).delete()[0]
    rehearsals = RehearsalMinute.objects.filter(minute__lt=kept_from).delete()[0]
    rejections = Rejection.objects.filter(
        at__lt=now - settings.SLUICE_STATS_REJECTION_RETENTION_DAYS * days
    ).delete()[0]
    old = StreamEntry.objects.filter(
        processed_at__lt=now - settings.SLUICE_STATS_LEDGER_RETENTION_DAYS * days
    )
    pending = _oldest_pending_ms()
    if pending is not None:
        old = old.filter(entry_ms__lt=pending)
    return {
        "minutes": minutes,
        "peaks": peaks,
        "hours": hours,
        "rehearsals": rehearsals,
        "rejections": rejections,
        "ledger": old.delete()[0],
    }


def _oldest_pending_ms() -> int | None:
    client, stream = redis_client(), decision_stream()
    try:
        summary = client.xpending(stream, GROUP)
    except redis.ResponseError:  # no stream or no group yet: nothing pending
        return None
    return entry_ms(_text(summary["min"])) if summary["pending"] else None
