"""One batch of decision events, tallied in memory and written with a few statements.

Stream entries come from gateways: every field is checked, and an event that
does not read as the format of ``sluice.metrics`` is counted as
malformed and skipped, so that one bad gateway can never stop the aggregation.

Beside the counts per outcome, each minute of a tenant and route gets its 60
per-second counts and each hour its maxima (``limits.traffic.peaks``), for the
impact estimate.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from datetime import UTC, datetime
from typing import Any

from django.db import connection

from limits.choices import Outcome
from limits.models import DecisionMinute, Rejection, StatCounter
from limits.traffic.peaks import Peaks
from limits.traffic.rehearsal import RehearsalTally

__all__ = ["Tally", "entry_ms"]

_OUTCOMES = set(Outcome.values)
_TEXT = 100  #: longest tenant, route or gateway kept (the columns' length)


def entry_ms(entry_id: str) -> int:
    """The milliseconds part of a stream entry id (``1700000000000-3``)."""
    return int(entry_id.partition("-")[0])


def _field(fields: dict, name: str) -> str:
    value = fields.get(name.encode(), fields.get(name, b""))
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class Tally:
    """Counts of a batch: per minute x tenant x route x outcome, totals, rejections.

    ``events`` counts decisions (a record of ``count`` identical decisions of
    one second counts ``count``); the rejection log keeps one row per record.
    """

    def __init__(self, *, per_tenant: int) -> None:
        self.per_tenant = per_tenant
        self.minutes: Counter[tuple[int, str, str, str]] = Counter()
        self.peaks = Peaks()
        self.totals: Counter[str] = Counter()
        self.rejections: defaultdict[str, list[Rejection]] = defaultdict(list)
        self.rehearsals = RehearsalTally()
        self.events = self.lost = 0

    def add_entry(self, fields: dict) -> None:
        """Tally one stream entry (its fields as Redis returned them)."""
        if not fields:  # trimmed from the stream before it was read
            self.lost += 1
            self.totals["entries_lost"] += 1
            return
        dropped = _field(fields, "dropped")
        if dropped.isdigit() and int(dropped):
            self.totals["events_dropped"] += int(dropped)
        gateway = _field(fields, "gw")[:_TEXT]
        self.rehearsals.add_field(_field(fields, "rehearsals"))
        try:
            events = json.loads(_field(fields, "events"))
        except ValueError:
            events = None
        if not isinstance(events, list):
            self.totals["events_malformed"] += 1
            return
        for event in events:
            self.add_event(event, gateway)

    def add_event(self, event: Any, gateway: str) -> None:
        if not _well_formed(event):
            self.totals["events_malformed"] += 1
            return
        at, tenant, route, _, _, outcome, _, count = event
        tenant, route = tenant[:_TEXT], route[:_TEXT]
        self.events += count
        self.minutes[(at // 60_000, tenant, route, outcome)] += count
        self.peaks.add(at, tenant, route, outcome, count)
        self.totals[f"decisions_{outcome}"] += count
        if outcome == Outcome.LIMITED:
            self._rejected(event, tenant, route, gateway)

    def _rejected(self, event: list, tenant: str, route: str, gateway: str) -> None:
        at, _, _, policy, version, _, limit, count = event
        kept = self.rejections[tenant]
        kept.append(
            Rejection(
                at=datetime.fromtimestamp(at / 1000, UTC),
                tenant=tenant,
                route=route,
                policy=policy[:220],
                limit=limit[:40],
                dimension=limit.rpartition("-")[0][:10],
                snapshot_version=version,
                gateway=gateway,
                count=count,
            )
        )
        if len(kept) > 2 * self.per_tenant:  # keep memory bounded under a flood
            kept.sort(key=lambda r: r.at, reverse=True)
            del kept[self.per_tenant :]

    def save(self) -> None:
        """Write the tally (inside the caller's transaction)."""
        self._upsert_minutes()
        if self.rehearsals.malformed:
            self.totals["rehearsals_malformed"] += self.rehearsals.malformed
        self.peaks.save()
        self._add_totals()
        self._keep_rejections()
        self.rehearsals.save()

    def _upsert_minutes(self) -> None:
        if not self.minutes:
            return
        rows = sorted(self.minutes.items())  # one lock order for concurrent runs
        table = DecisionMinute._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (minute, tenant, route, outcome, count) "
                "SELECT to_timestamp(m * 60), t, r, o, c FROM unnest("
                "%s::bigint[], %s::text[], %s::text[], %s::text[], %s::bigint[]"
                ") AS v(m, t, r, o, c) "
                "ON CONFLICT (minute, tenant, route, outcome) "
                f"DO UPDATE SET count = {table}.count + EXCLUDED.count",
                [
                    list(column)
                    for column in zip(*((*k, v) for k, v in rows), strict=True)
                ],
            )

    def _add_totals(self) -> None:
        if not self.totals:
            return
        names, values = zip(*sorted(self.totals.items()), strict=True)
        table = StatCounter._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (name, value) "
                "SELECT * FROM unnest(%s::text[], %s::bigint[]) "
                f"ON CONFLICT (name) DO UPDATE SET value = {table}.value + EXCLUDED.value",
                [list(names), list(values)],
            )

    def _keep_rejections(self) -> None:
        """Insert the newest rejections of each tenant, then trim each to the bound."""
        rows = []
        for kept in self.rejections.values():
            kept.sort(key=lambda r: r.at, reverse=True)
            rows += kept[: self.per_tenant]
        if not rows:
            return
        Rejection.objects.bulk_create(rows)
        table = Rejection._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"DELETE FROM {table} WHERE id IN (SELECT id FROM ("
                "SELECT id, row_number() OVER (PARTITION BY tenant ORDER BY at DESC, id DESC) AS n "
                f"FROM {table} WHERE tenant = ANY(%s)) AS ranked WHERE n > %s)",
                [sorted(self.rejections), self.per_tenant],
            )


def _well_formed(event: Any) -> bool:
    if not isinstance(event, list) or len(event) != 8:
        return False
    at, tenant, route, policy, version, outcome, limit, count = event
    return (
        all(type(n) is int for n in (at, version, count))
        and version >= 0
        and count >= 1
        and all(isinstance(text, str) for text in (tenant, route, policy, limit))
        and outcome in _OUTCOMES
    )
