"""Calendar periods (sluice.calendar): the POSIX TZ rules snapshots carry, and the
bounds of days, months and billing cycles, held to zoneinfo over DST changes,
short months and leap years; and the calendar quota's place in the format."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from sluice import SnapshotError, validate_rules
from sluice.kinds import CALENDAR_QUOTA, Direction, kind_of
from sluice.model import (
    Calendar,
    CalendarQuota,
    Dimension,
    Rules,
    describe_limit,
    limit_in_words,
    parse_limit,
    parse_policy,
    parse_rules,
    parse_zone_rule,
    period_bounds,
    utc_offset,
)
from tests.client.factories import policy, rules

ZONES = (
    "UTC",
    "Europe/Paris",
    "America/New_York",
    "Australia/Sydney",  # DST across the new year
    "America/Havana",  # midnight skipped when DST starts
    "Asia/Beirut",  # midnight skipped, and repeated
    "America/Santiago",  # DST starts at 24:00
    "Asia/Kolkata",  # half-hour offset, no DST
    "Pacific/Chatham",  # +12:45 / +13:45
)


def tz_rule(zone: str) -> str:
    """The zone's POSIX TZ rule: the last line of its TZif file (what snapshots carry)."""
    return (
        Path("/usr/share/zoneinfo", zone)
        .read_bytes()
        .rstrip(b"\n")
        .rsplit(b"\n", 1)[-1]
        .decode()
    )


def local_midnight(zone: ZoneInfo, year: int, month: int, day: int) -> int:
    """Local midnight of a date, in zoneinfo's reading; a time skipped or repeated
    at a DST change: the earlier of its UTC instants (the format's choice)."""
    moment = datetime(year, month, day, tzinfo=zone)
    return int(
        min(moment.replace(fold=0).timestamp(), moment.replace(fold=1).timestamp())
    )


def expected_bounds(zone_name: str, instant: int, per: str, billing_day: int):
    """The period holding ``instant`` computed with zoneinfo and datetime."""
    zone = ZoneInfo(zone_name)
    local = datetime.fromtimestamp(instant, zone)
    if per == "day":
        days = [local.date() + timedelta(days=n) for n in range(-2, 3)]
        starts = [local_midnight(zone, d.year, d.month, d.day) for d in days]
    else:
        starts = []
        for offset in range(-2, 3):
            year, month = divmod(local.year * 12 + local.month - 1 + offset, 12)
            month += 1
            last = (
                datetime(year + month // 12, month % 12 + 1, 1) - timedelta(days=1)
            ).day
            starts.append(local_midnight(zone, year, month, min(billing_day, last)))
    index = max(i for i, start in enumerate(starts) if start <= instant)
    return starts[index], starts[index + 1], starts[index + 2]


def instants(year: int):
    """Moments of a year: every day at 00:30 and 23:30 UTC and at odd hours."""
    first = int(datetime(year, 1, 1, tzinfo=UTC).timestamp())
    for day in range(0, 366):
        for seconds in (1800, 7 * 3600 + 11, 13 * 3600 + 1, 84600):
            yield first + day * 86_400 + seconds


# -- the POSIX TZ rules ---------------------------------------------------------------


@pytest.mark.parametrize("zone", ZONES)
def test_zone_rule__offsets__as_zoneinfo_over_several_years(zone):
    # Given the zone's POSIX rule, as a snapshot carries it
    rule = parse_zone_rule(tz_rule(zone))
    # Then its offset at every sampled moment of 2026-2030 is zoneinfo's
    wrong = [
        t
        for year in range(2026, 2031)
        for t in instants(year)
        if utc_offset(rule, t)
        != datetime.fromtimestamp(t, ZoneInfo(zone)).utcoffset().total_seconds()
    ]
    assert wrong == []


@pytest.mark.parametrize(
    ("text", "offsets"),
    [
        ("UTC0", (0, None)),
        ("<+0530>-5:30", (19_800, None)),
        ("CET-1CEST,M3.5.0,M10.5.0/3", (3600, 7200)),
        ("EST5EDT,M3.2.0,M11.1.0", (-18_000, -14_400)),
        ("<-03>3<-02>,M3.5.0/-2,M10.5.0/-1", (-10_800, -7200)),  # negative times
        ("XXX3YYY,J60/2,300/25", (-10_800, -7200)),  # Jn and n forms
    ],
)
def test_zone_rule__forms__parsed(text, offsets):
    rule = parse_zone_rule(text)
    assert (rule.std, rule.dst) == offsets


@pytest.mark.parametrize(
    "text",
    [
        "",
        "U0",
        "CET",
        "CET-1CEST",
        "CET-1CEST,M13.5.0,M10.5.0",
        "CET-1CEST,M3.5.0",
        "<+03-3",
    ],
)
def test_zone_rule__not_a_rule__value_error(text):
    with pytest.raises(ValueError, match=r"\w"):
        parse_zone_rule(text)


# -- period bounds ----------------------------------------------------------------------


@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("per", ["day", "month"])
def test_period_bounds__calendar__as_zoneinfo(zone, per):
    # Given a zone and a leap year followed by an ordinary one (DST changes in both)
    rule = tz_rule(zone)
    # Then the day or month holding every sampled moment is zoneinfo's
    wrong = [
        (t, period_bounds(t, per, "calendar", rule), expected_bounds(zone, t, per, 1))
        for year in (2028, 2029)
        for t in instants(year)
        if period_bounds(t, per, "calendar", rule) != expected_bounds(zone, t, per, 1)
    ]
    assert wrong == []


@pytest.mark.parametrize("billing_day", [1, 17, 29, 30, 31])
@pytest.mark.parametrize(
    "zone", ["UTC", "Europe/Paris", "Australia/Sydney", "America/Havana"]
)
def test_period_bounds__billing_cycle__as_zoneinfo(zone, billing_day):
    # Given a billing day, over a leap February (2028) and an ordinary one (2027)
    rule = tz_rule(zone)
    wrong = [
        t
        for year in (2027, 2028)
        for t in instants(year)
        if period_bounds(t, "month", "billing", rule, billing_day)
        != expected_bounds(zone, t, "month", billing_day)
    ]
    assert wrong == []


def test_period_bounds__anchor_31__february_ends_the_cycle_on_its_last_day():
    # Given a tenant billed on the 31st, in UTC, on 2028-02-10 (a leap year)
    instant = int(datetime(2028, 2, 10, tzinfo=UTC).timestamp())
    # Then its cycle runs from Jan 31 to Feb 29, then to Mar 31
    bounds = period_bounds(instant, "month", "billing", "UTC0", 31)
    assert [datetime.fromtimestamp(b, UTC).date().isoformat() for b in bounds] == [
        "2028-01-31",
        "2028-02-29",
        "2028-03-31",
    ]


def test_period_bounds__paris_day_of_the_dst_change__23_hours():
    # Given the day Paris moves its clocks forward (2026-03-29)
    instant = int(datetime(2026, 3, 29, 12, tzinfo=UTC).timestamp())
    start, end, next_end = period_bounds(
        instant, "day", "calendar", tz_rule("Europe/Paris")
    )
    # Then that day lasts 23 hours, from 23:00 UTC the day before; the next one 24
    assert datetime.fromtimestamp(start, UTC) == datetime(2026, 3, 28, 23, tzinfo=UTC)
    assert (end - start, next_end - end) == (23 * 3600, 24 * 3600)


def test_period_bounds__unknown_period__value_error():
    with pytest.raises(ValueError, match="no period 'week'"):
        period_bounds(0, "week", "calendar", "UTC0")


# -- the format -------------------------------------------------------------------------


def quota(dimension="tenant", most=10_000, per="month", **members) -> CalendarQuota:
    return CalendarQuota(Dimension(dimension), most, per, **members)


def test_quota__to_json_and_back__cycle_written_only_when_billing():
    monthly = quota()
    billed = quota(cycle="billing", cost=2, name="Calls")
    assert monthly.to_json() == {
        "kind": "calendar_quota",
        "dimension": "tenant",
        "limit": 10_000,
        "per": "month",
        "cost": None,
        "shadow": False,
    }
    assert billed.to_json()["cycle"] == "billing"
    assert parse_limit(monthly.to_json()) == monthly
    assert parse_limit(billed.to_json()) == billed
    assert kind_of(billed) is CALENDAR_QUOTA


@pytest.mark.parametrize(
    ("change", "path", "message"),
    [
        ({"per": "week"}, "p.limits[0].per", "'week' is not one of"),
        ({"cycle": "fiscal"}, "p.limits[0].cycle", "'fiscal' is not one of"),
        ({"limit": 0}, "p.limits[0].limit", "at least 1"),
        ({"burst": 5}, "p.limits[0]", "unknown member(s): burst"),
        ({"shards": 2}, "p.limits[0]", "unknown member(s): shards"),
    ],
)
def test_quota__bad_member__error_names_it(change, path, message):
    data = {**quota().to_json(), **change}
    document = {"scope": "default", "route": "search", "expires_at": None}
    with pytest.raises(SnapshotError) as error:
        parse_policy({**document, "limits": [data]}, "p")
    assert error.value.path == path
    assert message in error.value.message


@pytest.mark.parametrize(
    ("limit", "field", "message"),
    [
        (quota(most=1, cost=2), "limits[0].limit", "below the request cost 2"),
        (quota(per="day", cycle="billing"), "limits[0].cycle", "per must be month"),
    ],
)
def test_quota__validation__field_named_problem(limit, field, message):
    problems = validate_rules(rules(policy("default", "search", limit)))
    assert [p.field for p in problems] == [field]
    assert message in problems[0].message


def test_rules__calendars_and_zones__written_only_when_set_and_read_back():
    # Given rules without calendars, and the same with one tenant's calendar
    plain = rules(policy("tenant:acme", "search", quota(cycle="billing")))
    paris = "CET-1CEST,M3.5.0,M10.5.0/3"
    dated = Rules(
        plain.tiers,
        plain.tenants,
        plain.routes,
        plain.policies,
        calendars={
            "acme": Calendar("Europe/Paris", 17),
            "globex": Calendar(billing_day=3),
        },
        zones={"Europe/Paris": paris},
    )
    # Then the plain rules have neither member (older snapshots keep their bytes)
    assert {"calendars", "zones"}.isdisjoint(plain.to_json())
    # And the calendars leave out members at their default, and read back the same
    assert dated.to_json()["calendars"] == {
        "acme": {"zone": "Europe/Paris", "billing_day": 17},
        "globex": {"billing_day": 3},
    }
    assert parse_rules(dated.to_json()) == dated
    assert dated.calendar("globex") == Calendar("UTC", 3)
    assert dated.calendar("initech") == dated.calendar(None) == Calendar()


@pytest.mark.parametrize(
    ("calendars", "zones", "path", "message"),
    [
        ({"acme": {"zone": "Europe/Paris"}}, {}, "rules.calendar:acme.zone", "no rule"),
        ({"initech": {}}, {}, "rules.calendar:initech.tenant", "unknown tenant"),
        (
            {"acme": {"billing_day": 32}},
            {},
            "rules.calendars.acme.billing_day",
            "at most 31",
        ),
        (
            {"acme": {"billing_day": 0}},
            {},
            "rules.calendars.acme.billing_day",
            "at least 1",
        ),
        ({"acme": {"day": 3}}, {}, "rules.calendars.acme", "unknown member(s): day"),
        (
            {},
            {"Europe/Paris": "CET-1CEST"},
            "rules.zones.Europe/Paris",
            "not a POSIX TZ rule",
        ),
    ],
)
def test_rules__bad_calendar_or_zone__error_names_it(calendars, zones, path, message):
    document = {**rules().to_json(), "calendars": calendars, "zones": zones}
    with pytest.raises(SnapshotError) as error:
        parse_rules(document)
    assert error.value.path == path
    assert message in error.value.message


@pytest.mark.parametrize(
    ("after", "direction"),
    [
        (quota(), Direction.UNCHANGED),
        (quota(most=5_000), Direction.LOWERED),
        (quota(most=10_001), Direction.RAISED),
        (quota(cost=2), Direction.LOWERED),
        (quota(cycle="billing"), Direction.LOWERED),  # the boundaries move
        (quota(most=10_000, per="day"), Direction.RAISED),  # the same per shorter
        (quota(most=300, per="day"), Direction.LOWERED),  # 9,000 / month or so
        (quota(most=400, per="day"), Direction.LOWERED),  # more a month, fewer at once
        (quota(most=10_001, cost=2), Direction.LOWERED),  # against the client wins
    ],
)
def test_quota__direction__against_the_client_is_lowered(after, direction):
    assert CALENDAR_QUOTA.direction(quota(), after, route_cost=1) is direction


def test_quota__in_words():
    assert (
        limit_in_words(quota(cycle="billing"))
        == "10,000 requests per billing month per account"
    )
    assert limit_in_words(quota("user", 50, "day", cost=2)) == (
        "50 requests per day per user; each request counts as 2"
    )
    assert describe_limit(quota(cycle="billing")) == (
        "per tenant: monthly quota (billing cycle) of 10,000 requests"
    )


def test_quota__shape_and_headers__period_of_the_bounds():
    # Given 10 per day over a day of 86,400 s, at a cost of 2
    bounds = period_bounds(1_800_000_000, "day", "calendar", "UTC0")
    shape = CALENDAR_QUOTA.shape(quota(most=10, per="day"), cost=2, bounds=bounds)
    # Then a tick is a tenth of the day, the item names the period, and the
    # script's arguments carry the bounds
    assert shape.tick == 8_640_000_000
    assert CALENDAR_QUOTA.advertised(quota(most=10, per="day"), shape) == (
        "tenant-day-quota",
        10,
        86_400,
    )
    start, end, next_end = bounds
    assert CALENDAR_QUOTA.arguments(shape, flag=b"1") == (
        b"2",
        b"10",
        b"1q%d:%d:%d" % (start, end, next_end),
    )
    # And the state reads: 4 used -> 6 left; a rejection waits for the end
    assert (shape.remaining(4 * shape.tick), shape.fits(8 * shape.tick)) == (6, True)
    rejected = 5_000_000 + 8 * shape.tick  # 5 s before the end, 9 used
    assert (shape.fits(rejected), shape.wait(rejected)) == (False, 5_000_000)
    assert shape.reset(rejected, (end - 5) * 1_000_000) == 5_000_000
