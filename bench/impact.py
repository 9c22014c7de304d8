"""The impact estimate of a lowering that reaches 1,000 tenants, on 7 days of traffic.

Runs in a Django process on the bench database (``bench/run.py`` sets it up;
alone: ``DJANGO_SETTINGS_MODULE=bench.settings DATABASE_URL=..._bench python -m
bench.impact``). Loads the per-second rows (``DecisionPeak``) with one
``INSERT ... SELECT`` from ``generate_series`` (a few dozen second patterns,
drawn per row), vacuums the table as autovacuum would, then times
``impact_estimate`` for a lowering of tier pro's search limit. Prints Markdown.

The traffic, per tenant of 1,000 (all in tier pro), on search and on orders:

* 100 busy tenants search every minute of the 7 days at about 5 requests a
  second; 50 of them have two hours a day at about 25 a second, with 40 in the
  busiest second: over the lowered limit (20 a second, burst 40);
* 900 quiet tenants search two hours a day at about 5 a second;
* every tenant reads orders one hour a day (its limit does not change).
"""

from __future__ import annotations

import argparse
import random
import time

import django

django.setup()

from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from bench.common import machine_line, spread, table  # noqa: E402
from limits.diff.diffing import rules_diff  # noqa: E402
from limits.models import DecisionHour, DecisionPeak  # noqa: E402
from limits.traffic.estimate import impact_estimate  # noqa: E402
from sluice import ALL_ROUTES, DEFAULT_SCOPE, Policy, Route, Rules  # noqa: E402
from sluice.snapshot import Dimension, FailureMode, Limit  # noqa: E402

PATTERNS = 40  #: second patterns of each kind, drawn at random per row


def rules_with(rate: int, burst: int, tenants: int) -> Rules:
    """Tier pro's search at ``rate`` per second; everything else as it is."""
    return Rules(
        tiers={"pro": "Pro"},
        tenants={f"t{i:04d}": "pro" for i in range(tenants)},
        routes={
            "search": Route("search", ("GET",), "/v1/search", 1, FailureMode.OPEN),
            "orders": Route("orders", ("GET",), "/v1/orders", 1, FailureMode.OPEN),
        },
        policies=(
            Policy(DEFAULT_SCOPE, ALL_ROUTES, (Limit(Dimension.IP, 1000, 1, 1000),)),
            Policy("tier:pro", "search", (Limit(Dimension.TENANT, rate, 1, burst),)),
        ),
    )


def patterns(mean: int, peak: int, rng: random.Random) -> list[list[int]]:
    """Minutes of per-second counts around ``mean``, one second at ``peak``."""
    found = []
    for _ in range(PATTERNS):
        seconds = [max(0, mean + rng.randint(-mean // 2, mean // 2)) for _ in range(60)]
        seconds[rng.randrange(60)] = peak
        found.append(seconds)
    return found


def load(tenants: int, days: int) -> int:
    """Fill ``DecisionPeak`` with the traffic above, ending now; return its rows."""
    rng = random.Random(19)
    DecisionPeak.objects.all().delete()
    DecisionHour.objects.all().delete()
    calm, busy = patterns(5, 10, rng), patterns(25, 40, rng)
    table_name = DecisionPeak._meta.db_table
    minutes = days * 1440
    end = timezone.now().replace(minute=0, second=0, microsecond=0)
    with connection.cursor() as cursor:
        cursor.execute(
            "CREATE TEMP TABLE pattern (kind text, n int, seconds int[], "
            "total bigint, peak int)"
        )
        for kind, found in (("calm", calm), ("busy", busy)):
            for n, seconds in enumerate(found):
                cursor.execute(
                    "INSERT INTO pattern VALUES (%s, %s, %s, %s, %s)",
                    [kind, n, seconds, sum(seconds), max(seconds)],
                )
        # minute m counts back from now; hour of day h = (m / 60) % 24
        cursor.execute(
            f"INSERT INTO {table_name} (minute, tenant, route, count, limited, peak, seconds) "
            "SELECT %s::timestamptz - make_interval(mins => m.m + 1), t.slug, r.route, "
            "p.total, 0, p.peak, p.seconds "
            "FROM (SELECT i, format('t%%s', lpad(i::text, 4, '0')) AS slug "
            "      FROM generate_series(0, %s - 1) AS i) AS t "
            "CROSS JOIN generate_series(0, %s - 1) AS m(m) "
            "CROSS JOIN (VALUES ('search'), ('orders')) AS r(route) "
            "JOIN pattern AS p ON p.n = (t.i * 7 + m.m * 13) %% %s AND p.kind = CASE "
            "  WHEN r.route = 'search' AND t.i < 50 AND (m.m / 60) %% 24 IN (9, 15) "
            "  THEN 'busy' ELSE 'calm' END "
            "WHERE CASE WHEN r.route = 'orders' THEN (m.m / 60) %% 24 = 11 "
            "  WHEN t.i < 100 THEN true "
            "  ELSE (m.m / 60) %% 24 IN (10, 14) END",
            [end, tenants, minutes, PATTERNS],
        )
        hours = DecisionHour._meta.db_table  # what the aggregation keeps beside them
        cursor.execute(
            f"INSERT INTO {hours} (tenant, route, hour, count, limited, busiest_minute, peak) "
            "SELECT tenant, route, date_trunc('hour', minute), sum(count), sum(limited), "
            f"max(count), max(peak) FROM {table_name} GROUP BY 1, 2, 3"
        )
        for name in (table_name, hours):  # what autovacuum does to old rows
            cursor.execute(f"VACUUM ANALYZE {name}")
        return DecisionPeak.objects.count()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tenants", type=int, default=1000)
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument(
        "--keep", action="store_true", help="time the rows already loaded (a rerun)"
    )
    args = parser.parse_args()
    began = time.perf_counter()
    rows = DecisionPeak.objects.count() if args.keep else load(args.tenants, args.days)
    loaded = time.perf_counter() - began
    old = rules_with(100, 200, args.tenants)
    new = rules_with(20, 40, args.tenants)
    diff = rules_diff(old, new)
    seconds, cpu, impact = [], [], None
    for _ in range(args.repeats):
        began, began_cpu = time.perf_counter(), time.process_time()
        impact = impact_estimate(old=old, new=new, diff=diff)
        seconds.append(time.perf_counter() - began)
        cpu.append(time.process_time() - began_cpu)
    assert impact is not None
    hit = impact.by_tenant()
    print("## Impact estimate\n")
    print(machine_line() + "\n")
    print(
        f"{args.tenants} tenants reached, {args.days} days, {rows:,} per-second rows "
        f"(loaded and vacuumed in {loaded:.1f} s). Lowering tier pro's search from "
        "100/s (burst 200) to 20/s (burst 40).\n"
    )
    print(
        table(
            ["what", "figure"],
            [
                ["seconds per estimate, median [min .. max]", spread(seconds, 3)],
                ["of which CPU seconds of this process (the replay)", spread(cpu, 3)],
                [
                    "series reported (tenant x route whose policy changes)",
                    len(impact.rows),
                ],
                ["series replayed (the others ruled out in SQL)", impact.replayed],
                ["tenants the lowering would reject requests of", len(hit)],
                [
                    "requests seen on those series",
                    f"{sum(r.seen for r in impact.rows):,}",
                ],
                [
                    "requests the lowering would reject",
                    f"{sum(r.rejected_new for r in impact.rows):,}",
                ],
            ],
        )
    )


if __name__ == "__main__":
    main()
