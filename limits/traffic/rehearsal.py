"""Rehearsals of scheduled versions: rolled up from the decision stream, and read back.

While a version is scheduled, gateways decide every request it would change by
its rules too, in shadow (``sluice.rehearsal``), and add rehearsal records to
their stream entries (field ``rehearsals``, ``sluice.metrics``). The tally of
each batch counts them here per version, minute, tenant and route
(:class:`RehearsalTally`, in the batch's transaction, so exactly once like the
other counts); :func:`rehearsal_figures` is what the version page, the API and
anything else that wants "whom would this version hit" read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import Count, Q, Sum

from limits.models import RehearsalMinute

__all__ = [
    "RehearsalFigure",
    "RehearsalRow",
    "RehearsalTally",
    "rehearsal_figures",
    "rehearsal_recent",
    "rehearsal_totals",
]

_TEXT = 100  #: longest tenant or route kept (the columns' length)


@dataclass(frozen=True, slots=True)
class RehearsalFigure:
    """What a version's rehearsal saw of one tenant on one route."""

    tenant: str  #: "" for requests without a tenant
    route: str  #: "" for requests that matched no route
    requests: int  #: requests that rehearsed the version
    would_reject: int  #: of those, how many it would have rejected


def rehearsal_figures(
    *, version: int, since: datetime, tenant: str | None = None
) -> list[RehearsalFigure]:
    """Per tenant and route, the requests that rehearsed ``version`` from the minute
    of ``since`` on, and how many of them it would have rejected; the most rejected
    first. ``tenant``: that tenant's figures only.

    Only requests whose policy the version changes are rehearsed, so a tenant
    absent here is one the version does not change (or that sent nothing).
    """
    rows = RehearsalMinute.objects.filter(
        version=version, minute__gte=since.replace(second=0, microsecond=0)
    )
    if tenant is not None:
        rows = rows.filter(tenant=tenant)
    totals = (
        rows.values("tenant", "route")
        .annotate(requests=Sum("requests"), would_reject=Sum("would_reject"))
        .order_by("-would_reject", "-requests", "tenant", "route")
    )
    return [RehearsalFigure(**row) for row in totals]


@dataclass(frozen=True, slots=True)
class RehearsalRow:
    """One tenant and route of a version's page: its last hour and its last day."""

    tenant: str
    route: str
    hour: RehearsalFigure | None  #: None: nothing rehearsed in the last hour
    day: RehearsalFigure


def rehearsal_recent(*, version: int, now: datetime) -> list[RehearsalRow]:
    """The version page's table: per tenant and route rehearsed in the day before
    ``now``, the figures of the last hour and of the last day; the most rejected
    in the last day first."""
    hour = {
        (f.tenant, f.route): f
        for f in rehearsal_figures(version=version, since=now - timedelta(hours=1))
    }
    return [
        RehearsalRow(day.tenant, day.route, hour.get((day.tenant, day.route)), day)
        for day in rehearsal_figures(version=version, since=now - timedelta(days=1))
    ]


def rehearsal_totals(*, versions: list[int], since: datetime) -> dict[int, dict]:
    """Per version of ``versions`` rehearsed since ``since``: ``requests``,
    ``would_reject`` and ``tenants`` (how many tenants it would have rejected at
    least once), in one query; versions not rehearsed are absent."""
    rows = (
        RehearsalMinute.objects.filter(
            version__in=versions, minute__gte=since.replace(second=0, microsecond=0)
        )
        .values("version")
        .annotate(  # names of their own: a filter on a column, not on its sum
            seen=Sum("requests"),
            rejected=Sum("would_reject"),
            hit=Count("tenant", distinct=True, filter=Q(would_reject__gt=0)),
        )
    )
    return {
        row["version"]: {
            "requests": row["seen"],
            "would_reject": row["rejected"],
            "tenants": row["hit"],
        }
        for row in rows
    }


class RehearsalTally:
    """Rehearsal records of one batch of stream entries, counted and written."""

    def __init__(self) -> None:
        #: (version, minute since the epoch, tenant, route) -> [requests, would reject]
        self.minutes: dict[tuple[int, int, str, str], list[int]] = {}
        self.malformed = 0  #: records that do not read as the format

    def add_field(self, raw: str) -> None:
        """Count the records of one entry's ``rehearsals`` field ("" when absent)."""
        if not raw:
            return
        try:
            records = json.loads(raw)
        except ValueError:
            records = None
        if not isinstance(records, list):
            self.malformed += 1
            return
        for record in records:
            self._add(record)

    def _add(self, record: Any) -> None:
        if not _well_formed(record):
            self.malformed += 1
            return
        at, tenant, route, version, requests, would_reject = record
        key = (version, at // 60_000, tenant[:_TEXT], route[:_TEXT])
        counts = self.minutes.setdefault(key, [0, 0])
        counts[0] += requests
        counts[1] += would_reject

    def save(self) -> None:
        """Add the counts to their rows (inside the caller's transaction)."""
        if not self.minutes:
            return
        ordered = sorted(self.minutes.items())  # one lock order for concurrent runs
        table = RehearsalMinute._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (version, minute, tenant, route, requests, would_reject) "
                "SELECT v, to_timestamp(m * 60), t, r, n, w FROM unnest("
                "%s::int[], %s::bigint[], %s::text[], %s::text[], %s::bigint[], %s::bigint[]"
                ") AS x(v, m, t, r, n, w) "
                "ON CONFLICT (version, minute, tenant, route) DO UPDATE SET "
                f"requests = {table}.requests + EXCLUDED.requests, "
                f"would_reject = {table}.would_reject + EXCLUDED.would_reject",
                [
                    list(column)
                    for column in zip(*((*k, *v) for k, v in ordered), strict=True)
                ],
            )


def _well_formed(record: Any) -> bool:
    if not isinstance(record, list) or len(record) != 6:
        return False
    at, tenant, route, version, requests, would_reject = record
    return (
        all(type(n) is int for n in (at, version, requests, would_reject))
        and version >= 1
        and requests >= 1
        and 0 <= would_reject <= requests
        and isinstance(tenant, str)
        and isinstance(route, str)
    )
