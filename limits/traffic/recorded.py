"""Reads of the recorded traffic the impact estimate replays (``limits.traffic.peaks`` writes it).

Three statements, each one whatever the reach: the series of the reached
tenants with their totals and busiest windows (``DecisionHour``), the hours of
the series that could be rejected, and the minutes with their seconds
(``DecisionPeak``) of the hours that could.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from itertools import groupby

from django.db import connection

from limits.models import DecisionHour, DecisionPeak
from limits.traffic.replay import Minute

__all__ = ["Series", "hours_of", "minutes_of", "series_of"]


@dataclass(frozen=True)
class Series:
    """One tenant's traffic on one route over the window, in figures."""

    tenant: str
    route: str
    seen: int  #: requests, every outcome
    limited: int  #: of them, rejected when they came
    #: requests in the busiest second, minute, hour and day (``replay.WINDOWS``)
    busiest: tuple[int, int, int, int]


def series_of(tenants: list[str], since: datetime, until: datetime) -> list[Series]:
    """Each reached tenant's routes with traffic: totals and busiest windows, from the
    hourly rows in one aggregate."""
    if not tenants:
        return []
    table = DecisionHour._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT tenant, route, sum(n), sum(l), max(p), max(m), max(h), max(n) FROM ("
            "SELECT tenant, route, sum(count) AS n, sum(limited) AS l, max(peak) AS p, "
            "max(busiest_minute) AS m, max(count) AS h "
            f"FROM {table} WHERE tenant = ANY(%s) AND hour >= %s AND hour < %s "
            "GROUP BY tenant, route, date_trunc('day', hour)) AS days "
            "GROUP BY tenant, route ORDER BY tenant, route",
            [tenants, hour_floor(since), until],
        )
        return [
            Series(t, r, int(n), int(lim), (p, int(m), int(h), int(d)))
            for t, r, n, lim, p, m, h, d in cursor.fetchall()
        ]


def hour_floor(moment: datetime) -> datetime:
    """The start of ``moment``'s hour: the window's first hourly row."""
    return moment.replace(minute=0, second=0, microsecond=0)


def hours_of(
    risky: list[Series], since: datetime, until: datetime
) -> dict[tuple[str, str], list[tuple[int, int, int, int]]]:
    """(first minute, requests, busiest minute, busiest second) of each hour of ``risky``."""
    if not risky:
        return {}
    table = DecisionHour._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT h.tenant, h.route, (extract(epoch FROM h.hour) / 60)::bigint, "
            "h.count, h.busiest_minute, h.peak "
            "FROM unnest(%s::text[], %s::text[]) AS s(tenant, route) "
            f"JOIN {table} AS h ON h.tenant = s.tenant AND h.route = s.route "
            "WHERE h.hour >= %s AND h.hour < %s ORDER BY h.tenant, h.route, h.hour",
            [
                [s.tenant for s in risky],
                [s.route for s in risky],
                hour_floor(since),
                until,
            ],
        )
        rows = cursor.fetchall()
    return {
        key: [(at, n, m, p) for _, _, at, n, m, p in group]
        for key, group in groupby(rows, key=lambda row: (row[0], row[1]))
    }


def minutes_of(
    hours: list[tuple[str, str, int]], since: datetime, until: datetime
) -> dict[tuple[str, str, int], list[Minute]]:
    """The recorded minutes, with their seconds, of (tenant, route, hour) triples."""
    if not hours:
        return {}
    tenants, routes, starts = zip(*hours, strict=True)
    table = DecisionPeak._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.tenant, p.route, s.hour, "
            "(extract(epoch FROM p.minute) / 60)::bigint, p.count, p.seconds "
            f"FROM unnest(%s::text[], %s::text[], %s::bigint[]) AS s(tenant, route, hour) "
            f"JOIN {table} AS p ON p.tenant = s.tenant AND p.route = s.route "
            "AND p.minute >= to_timestamp(s.hour * 60) "
            "AND p.minute < to_timestamp((s.hour + 60) * 60) "
            "WHERE p.minute >= %s AND p.minute < %s "
            "ORDER BY p.tenant, p.route, p.minute",
            [list(tenants), list(routes), list(starts), since, until],
        )
        rows = cursor.fetchall()
    found: dict[tuple[str, str, int], list[Minute]] = {}
    for tenant, route, hour, at, count, seconds in rows:
        found.setdefault((tenant, route, hour), []).append(Minute(at, count, seconds))
    return found
