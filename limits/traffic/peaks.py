"""What the impact estimate needs of a batch: per-second counts of each minute, and each hour's maxima.

Events carry the second they were decided in. A second's events may come from
several gateways and batches, so a minute's 60 counts (``DecisionPeak``) are
added element by element on upsert, never replaced; the upsert returns each
minute's totals as they now stand, and the hour's row (``DecisionHour``) keeps
the greatest of them: counts only grow, so that maximum is exact.
"""

from __future__ import annotations

from collections import Counter, defaultdict

from django.db import connection

from limits.choices import Outcome
from limits.models import SECONDS, DecisionHour, DecisionPeak

__all__ = ["Peaks"]


class Peaks:
    """Per-second counts of a batch, per minute x tenant x route."""

    def __init__(self) -> None:
        self.seconds: defaultdict[tuple[int, str, str], list[int]] = defaultdict(
            lambda: [0] * SECONDS
        )
        self.limited: Counter[tuple[int, str, str]] = Counter()

    def add(
        self, at_ms: int, tenant: str, route: str, outcome: str, count: int
    ) -> None:
        key = (at_ms // 60_000, tenant, route)
        self.seconds[key][at_ms // 1000 % SECONDS] += count
        if outcome == Outcome.LIMITED:
            self.limited[key] += count

    def save(self) -> None:
        """Upsert the minutes, then their hours (inside the caller's transaction)."""
        if self.seconds:
            self._upsert_hours(self._upsert_minutes())

    def _upsert_minutes(self) -> dict[tuple[int, str, str], tuple[int, int]]:
        """Add the batch's seconds; return each minute's (count, peak) as it now stands."""
        rows = sorted(self.seconds.items())  # one lock order for concurrent runs
        minutes, tenants, routes = (
            list(c) for c in zip(*(k for k, _ in rows), strict=True)
        )
        flat = [n for _, counts in rows for n in counts]  # row i: flat[60i : 60i + 60]
        table = DecisionPeak._meta.db_table
        merged = (  # element by element: the same second may come in several batches
            f"(SELECT array_agg(a + b ORDER BY i) FROM unnest({table}.seconds, "
            "EXCLUDED.seconds) WITH ORDINALITY AS s(a, b, i))"
        )
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (minute, tenant, route, count, limited, peak, seconds) "
                "SELECT to_timestamp(m * 60), t, r, "
                "(SELECT sum(n) FROM unnest(s) AS n), l, (SELECT max(n) FROM unnest(s) AS n), s "
                "FROM (SELECT m, t, r, l, (%s::int[])[(i - 1) * 60 + 1 : i * 60] AS s "
                "FROM unnest(%s::bigint[], %s::text[], %s::text[], %s::bigint[]) "
                "WITH ORDINALITY AS v(m, t, r, l, i)) AS rows "
                "ON CONFLICT (tenant, route, minute) DO UPDATE SET "
                f"count = {table}.count + EXCLUDED.count, "
                f"limited = {table}.limited + EXCLUDED.limited, seconds = {merged}, "
                f"peak = (SELECT max(n) FROM unnest({merged}) AS n) "
                "RETURNING (extract(epoch FROM minute) / 60)::bigint, tenant, route, count, peak",
                [flat, minutes, tenants, routes, [self.limited[k] for k, _ in rows]],
            )
            return {(m, t, r): (n, p) for m, t, r, n, p in cursor.fetchall()}

    def _upsert_hours(self, now: dict[tuple[int, str, str], tuple[int, int]]) -> None:
        hours: dict[tuple[str, str, int], list[int]] = {}
        for (minute, tenant, route), counts in self.seconds.items():
            total, peak = now[(minute, tenant, route)]
            row = hours.setdefault((tenant, route, minute // 60), [0, 0, 0, 0])
            row[0] += sum(counts)
            row[1] += self.limited[(minute, tenant, route)]
            row[2], row[3] = max(row[2], total), max(row[3], peak)
        keys = sorted(hours)  # one lock order for concurrent runs
        columns = [list(c) for c in zip(*((*k, *hours[k]) for k in keys), strict=True)]
        table = DecisionHour._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (tenant, route, hour, count, limited, busiest_minute, peak) "
                "SELECT t, r, to_timestamp(h * 3600), n, l, m, p FROM unnest("
                "%s::text[], %s::text[], %s::bigint[], %s::bigint[], %s::bigint[], "
                "%s::bigint[], %s::int[]) AS v(t, r, h, n, l, m, p) "
                "ON CONFLICT (tenant, route, hour) DO UPDATE SET "
                f"count = {table}.count + EXCLUDED.count, "
                f"limited = {table}.limited + EXCLUDED.limited, "
                f"busiest_minute = greatest({table}.busiest_minute, EXCLUDED.busiest_minute), "
                f"peak = greatest({table}.peak, EXCLUDED.peak)",
                columns,
            )
