"""Calendar periods of a tenant: local days and months, and billing cycles.

A calendar quota (:mod:`.kinds.quota`) resets at local midnight in the tenant's
time zone, on the first of the month or on its billing day. The zone is the
POSIX TZ rule the snapshot carries (``rules.zones``, the last line of the zone's
TZif file, e.g. ``CET-1CEST,M3.5.0,M10.5.0/3``), so every gateway of a fleet
computes the same boundaries whatever tzdata it has. The rule is evaluated here,
in integers, without ``datetime`` or ``zoneinfo``: the nginx module
(``nginx/calendar.lua``) is this module line for line.

A local time that does not exist (skipped at a DST change) or exists twice is
taken at the earlier of its UTC instants (``docs/limit-kinds.md``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

__all__ = [
    "DEFAULT_ZONE",
    "UTC_RULE",
    "Calendar",
    "ZoneRule",
    "local_to_utc",
    "parse_zone_rule",
    "period_bounds",
    "utc_offset",
]

DEFAULT_ZONE = "UTC"
UTC_RULE = "UTC0"  #: the rule of ``UTC``, known without a ``zones`` entry
_DAY = 86_400
_MONTH_DAYS = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclass(frozen=True, slots=True)
class Calendar:
    """A tenant's calendar: its time zone (IANA name) and billing day (1..31)."""

    zone: str = DEFAULT_ZONE
    billing_day: int = 1

    def to_json(self) -> dict[str, Any]:
        """The snapshot's ``calendars`` entry: members at their default are left out."""
        data: dict[str, Any] = {}
        if self.zone != DEFAULT_ZONE:
            data["zone"] = self.zone
        if self.billing_day != 1:
            data["billing_day"] = self.billing_day
        return data


#: A transition rule: ("M", month, week, weekday) / ("J", day 1..365) / ("N", day
#: 0..365), and the local time of day of the change, in seconds
_Change = tuple[tuple[str, int, int, int], int]


@dataclass(frozen=True, slots=True)
class ZoneRule:
    """A POSIX TZ rule, offsets in seconds EAST of UTC (POSIX writes them west)."""

    std: int  #: standard time's offset
    dst: int | None = None  #: daylight time's offset; None: no DST
    start: _Change | None = None  #: when DST starts, in standard local time
    end: _Change | None = None  #: when it ends, in daylight local time


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm)."""
    if month <= 2:
        year -= 1
    era = year // 400
    yoe = year - era * 400
    mp = month + 9 if month <= 2 else month - 3
    doy = (153 * mp + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


def _civil_from_days(days: int) -> tuple[int, int, int]:
    """(year, month, day) of ``days`` since 1970-01-01."""
    days += 719_468
    era = days // 146_097
    doe = days - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return (yoe + era * 400 + (1 if month <= 2 else 0), month, day)


def _leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _month_days(year: int, month: int) -> int:
    return 29 if month == 2 and _leap(year) else _MONTH_DAYS[month - 1]


def _change_day(year: int, rule: tuple[str, int, int, int]) -> int:
    """Days since the epoch of the day a transition rule names in ``year``."""
    form, a, b, c = rule
    if form == "J":  # 1..365, February 29 never counted
        return (
            _days_from_civil(year, 1, 1) + a - 1 + (1 if _leap(year) and a >= 60 else 0)
        )
    if form == "N":  # 0..365, February 29 counted
        return _days_from_civil(year, 1, 1) + a
    first = _days_from_civil(year, a, 1)  # Mm.w.d: weekday d of week w (5: last)
    day = first + (c - (first + 4) % 7) % 7 + 7 * (b - 1)  # 1970-01-01 was a Thursday
    while day >= first + _month_days(year, a):
        day -= 7
    return day


@lru_cache(maxsize=4096)
def _dst_span(rule: ZoneRule, year: int) -> tuple[int, int]:
    """UTC instants at which DST starts and ends in ``year`` (``start`` is read in
    standard time, ``end`` in daylight time, as POSIX says); cached: a period's
    bounds ask it a dozen times for the same year."""
    if rule.dst is None or rule.start is None or rule.end is None:
        return (0, 0)  # no DST: never asked (utc_offset)
    return (
        _change_day(year, rule.start[0]) * _DAY + rule.start[1] - rule.std,
        _change_day(year, rule.end[0]) * _DAY + rule.end[1] - rule.dst,
    )


def utc_offset(rule: ZoneRule, instant: int) -> int:
    """The zone's offset (seconds east of UTC) at ``instant`` (epoch seconds)."""
    if rule.dst is None:
        return rule.std
    year = _civil_from_days((instant + rule.std) // _DAY)[0]
    start, end = _dst_span(rule, year)
    if start < end:  # northern hemisphere: DST inside the year
        return rule.dst if start <= instant < end else rule.std
    return rule.dst if instant < end or instant >= start else rule.std  # southern


def local_to_utc(rule: ZoneRule, local: int) -> int:
    """The UTC instant of ``local`` (local epoch seconds); a local time skipped or
    repeated at a DST change: the earlier of its two UTC readings."""
    offsets = (rule.std,) if rule.dst is None else (rule.std, rule.dst)
    readings = [local - offset for offset in offsets]
    valid = [
        utc
        for utc, offset in zip(readings, offsets, strict=True)
        if utc_offset(rule, utc) == offset
    ]
    return min(valid or readings)


def _boundary(rule: ZoneRule, year: int, month: int, day: int) -> int:
    """The UTC instant of local midnight on a date (day 0 or past the month's end
    roll over, as the day count does)."""
    return local_to_utc(rule, (_days_from_civil(year, month, 1) + day - 1) * _DAY)


def _cycle_start(rule: ZoneRule, year: int, month: int, anchor: int) -> int:
    """Local midnight of the ``anchor`` day of a month (its last day if it has fewer)."""
    year, month = year + (month - 1) // 12, (month - 1) % 12 + 1
    return _boundary(rule, year, month, min(anchor, _month_days(year, month)))


def period_bounds(
    instant: int, per: str, cycle: str, zone_rule: str, billing_day: int = 1
) -> tuple[int, int, int]:
    """``(start, end, next_end)``, epoch seconds, of the period holding ``instant``:
    a local day (``per="day"``), a calendar month, or a billing month from the
    ``billing_day`` (``cycle="billing"``; a day the month lacks is its last day).

    ``zone_rule`` is a POSIX TZ rule (:func:`parse_zone_rule`); ValueError if it is
    not one, or ``per`` / ``cycle`` is unknown."""
    rule = parse_zone_rule(zone_rule)
    year, month, day = _civil_from_days((instant + utc_offset(rule, instant)) // _DAY)
    if per == "day":
        start = _boundary(rule, year, month, day)
        if (
            instant < start
        ):  # local midnight read at the earlier instant, see local_to_utc
            day -= 1
        elif instant >= _boundary(rule, year, month, day + 1):
            day += 1
        return (
            _boundary(rule, year, month, day),
            _boundary(rule, year, month, day + 1),
            _boundary(rule, year, month, day + 2),
        )
    if per != "month" or cycle not in ("calendar", "billing"):
        raise ValueError(f"no period {per!r} per {cycle!r} cycle")
    anchor = billing_day if cycle == "billing" else 1
    if instant < _cycle_start(rule, year, month, anchor):
        month -= 1
    elif instant >= _cycle_start(rule, year, month + 1, anchor):
        month += 1
    return (
        _cycle_start(rule, year, month, anchor),
        _cycle_start(rule, year, month + 1, anchor),
        _cycle_start(rule, year, month + 2, anchor),
    )


# -- POSIX TZ rules: std offset [dst [offset] ,start[/time],end[/time]] --------------


class _Reader:
    """A cursor over a POSIX TZ string."""

    def __init__(self, text: str) -> None:
        self.text, self.at = text, 0

    def peek(self) -> str:
        return self.text[self.at : self.at + 1]

    def take(self, char: str) -> bool:
        if self.peek() == char:
            self.at += 1
            return True
        return False

    def name(self) -> str:
        if self.take("<"):  # quoted: <+0330>
            end = self.text.find(">", self.at)
            if end < 0:
                raise ValueError("unterminated <name>")
            name, self.at = self.text[self.at : end], end + 1
        else:
            begin = self.at
            while self.peek().isalpha():
                self.at += 1
            name = self.text[begin : self.at]
        if len(name) < 3:
            raise ValueError(f"zone abbreviation too short at {self.at}")
        return name

    def number(self) -> int:
        begin = self.at
        while self.peek().isdigit():
            self.at += 1
        if begin == self.at:
            raise ValueError(f"number expected at {self.at}")
        return int(self.text[begin : self.at])

    def time(self, most: int) -> int:
        """[+-]hh[:mm[:ss]] in seconds, hours at most ``most``."""
        sign = -1 if self.take("-") else 1
        if sign == 1:
            self.take("+")
        seconds = self.number() * 3600
        if seconds > most * 3600:
            raise ValueError(f"hours out of range at {self.at}")
        for scale in (60, 1):
            if not self.take(":"):
                break
            part = self.number()
            if part > 59:
                raise ValueError(f"minutes or seconds out of range at {self.at}")
            seconds += part * scale
        return sign * seconds

    def change(self) -> _Change:
        if self.take("M"):
            month = self.number()
            week = self.number() if self.take(".") else 0
            weekday = self.number() if self.take(".") else -1
            if not (1 <= month <= 12 and 1 <= week <= 5 and 0 <= weekday <= 6):
                raise ValueError(f"bad Mm.w.d at {self.at}")
            day: tuple[str, int, int, int] = ("M", month, week, weekday)
        elif self.take("J"):
            julian = self.number()
            if not 1 <= julian <= 365:
                raise ValueError(f"bad Jn at {self.at}")
            day = ("J", julian, 0, 0)
        else:
            number = self.number()
            if number > 365:
                raise ValueError(f"bad day number at {self.at}")
            day = ("N", number, 0, 0)
        return (day, self.time(167) if self.take("/") else 7200)


@lru_cache(maxsize=1024)
def parse_zone_rule(text: str) -> ZoneRule:
    """The :class:`ZoneRule` of a POSIX TZ string (TZif footer form, RFC 8536:
    hours of a change time may run from -167 to 167); ValueError says why not."""
    reader = _Reader(text)
    reader.name()
    std = -reader.time(24)
    if reader.at == len(text):
        return ZoneRule(std)
    reader.name()
    dst = std + 3600
    if reader.peek() not in (",", ""):
        dst = -reader.time(24)
    if not reader.take(","):
        raise ValueError("a zone with daylight time needs its ,start,end rules")
    start = reader.change()
    if not reader.take(","):
        raise ValueError(f"',' expected at {reader.at}")
    end = reader.change()
    if reader.at != len(text):
        raise ValueError(f"unexpected {text[reader.at :]!r}")
    return ZoneRule(std, dst, start, end)
