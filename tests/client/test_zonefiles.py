"""The POSIX TZ rule of a zone, as the control plane writes it in snapshots' ``zones``:
the footer of the zone's TZif file, and nothing for names that are not zones."""

from __future__ import annotations

import zoneinfo
from datetime import UTC, datetime

import pytest

from sluice.calendar import parse_zone_rule, utc_offset
from sluice.zonefiles import zone_rule


@pytest.mark.parametrize(
    ("zone", "rule"),
    [
        ("Europe/Paris", "CET-1CEST,M3.5.0,M10.5.0/3"),
        ("America/New_York", "EST5EDT,M3.2.0,M11.1.0"),
        ("Asia/Tokyo", "JST-9"),
        ("Asia/Kolkata", "IST-5:30"),
        ("UTC", "UTC0"),
    ],
)
def test_zone_rule__known_zone__its_tzif_footer(zone, rule):
    assert zone_rule(zone) == rule


@pytest.mark.parametrize(
    "zone",
    ["Europe/Paris", "America/Sao_Paulo", "Australia/Lord_Howe", "Pacific/Chatham"],
)
def test_zone_rule__read_by_the_model__offsets_as_zoneinfo_says_this_year(zone):
    # The rule a snapshot carries gives the offsets zoneinfo gives, at both seasons
    rule = parse_zone_rule(zone_rule(zone))
    for month in (1, 7):
        moment = datetime(2026, month, 15, 12, tzinfo=UTC)
        expected = moment.astimezone(zoneinfo.ZoneInfo(zone)).utcoffset()
        assert utc_offset(rule, int(moment.timestamp())) == expected.total_seconds()


@pytest.mark.parametrize(
    "name",
    [
        "Mars/Olympus_Mons",
        "Europe",
        "../../etc/passwd",
        "/etc/localtime",
        "",
        "a/../UTC",
    ],
)
def test_zone_rule__not_a_zone__lookup_error(name):
    with pytest.raises(LookupError):
        zone_rule(name)
