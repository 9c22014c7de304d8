"""The limits a policy holds: token buckets (with their hot-key options), sliding
windows, calendar quotas and concurrency caps.

Part of snapshot format v1 (:mod:`.snapshot` re-exports everything here). The
hot-key options and concurrency caps were added to the format as *optional*
members: a limit at its defaults serializes exactly as before, so the canonical
bytes (and hashes) of snapshots that do not use them are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

__all__ = [
    "DEFAULT_LEASE_MS",
    "DEFAULT_TIMEOUT",
    "MAX_LEASE_MS",
    "MAX_PUBLIC_DESCRIPTION",
    "MAX_PUBLIC_NAME",
    "MAX_SHARDS",
    "MAX_TIMEOUT",
    "PERIODS",
    "PERIOD_WORDS",
    "QUOTA_CYCLES",
    "QUOTA_PERIODS",
    "CalendarQuota",
    "ConcurrencyLimit",
    "Dimension",
    "Limit",
    "RateLimit",
    "SlidingWindow",
    "cost_phrase",
    "describe_limit",
    "limit_in_words",
    "public_description",
    "public_name",
    "requests_phrase",
]

MAX_PUBLIC_NAME = 80  #: characters of a limit's public name
MAX_PUBLIC_DESCRIPTION = 300  #: characters of its public description

#: Allowed limit periods in seconds, with the unit people read.
PERIODS: Mapping[int, str] = {1: "s", 60: "min", 3600: "h", 86400: "day"}
MAX_SHARDS = 64  #: keys one bucket may be split into
DEFAULT_LEASE_MS = 1000  #: how long leased tokens stay spendable unless a limit says
MAX_LEASE_MS = 60_000
DEFAULT_TIMEOUT = 300  #: seconds before an unreleased in-flight entry expires
MAX_TIMEOUT = 86_400


class Dimension(StrEnum):
    """What a limit counts per: the bucket key's subject."""

    TENANT = "tenant"
    USER = "user"
    API_KEY = "api_key"
    IP = "ip"


@dataclass(frozen=True, slots=True)
class Limit:
    """One token bucket of a policy: ``rate`` tokens per ``period`` seconds, ``burst`` deep.

    Hot-key options (see ``docs/enforcement.md``), at most one of the two:
    ``shards`` splits the bucket into that many keys of ``1/shards`` of the rate
    and burst each; ``lease`` lets a gateway take that many tokens in one call
    and spend them in process for up to ``lease_ms``.
    """

    dimension: Dimension  #: what the bucket counts per
    rate: int  #: tokens added per period
    period: int  #: seconds, one of PERIODS
    burst: int  #: bucket capacity, at least the largest request cost
    cost: int | None = None  #: tokens per request; None means the route's cost
    shadow: bool = False  #: evaluated and reported, never rejects
    shards: int = 1  #: keys the bucket is split into (1: not split)
    lease: int = 0  #: tokens a gateway leases at once (0: no leases)
    lease_ms: int = DEFAULT_LEASE_MS  #: how long leased tokens may be spent
    #: what customers read in a 429 (:func:`public_name`); empty: derived from the limit
    name: str = ""
    description: str = ""  #: likewise (:func:`public_description`)

    def __post_init__(self) -> None:
        if not self.lease:  # one form for "no lease", so equal limits compare equal
            object.__setattr__(self, "lease_ms", DEFAULT_LEASE_MS)

    @property
    def hot(self) -> bool:
        """Whether a hot-key option is set (the bucket is sharded or leased)."""
        return self.shards > 1 or self.lease > 0

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "dimension": self.dimension.value,
            "rate": self.rate,
            "period": self.period,
            "burst": self.burst,
            "cost": self.cost,
            "shadow": self.shadow,
        }
        _hot_members(self, data)
        _public_members(self, data)
        return data

    def sort_key(self) -> tuple[str, int, int, int, int, bool]:
        return (
            self.dimension,
            self.period,
            self.rate,
            self.burst,
            self.cost or 0,
            self.shadow,
        )


@dataclass(frozen=True, slots=True)
class SlidingWindow:
    """At most ``limit`` requests' worth in any ``window`` seconds, per key (kind
    ``sliding_window``): Cloudflare's sliding-window counter, "100 per minute" read
    literally. The count is ``previous window's count x (1 - elapsed / window)
    + this window's count``; a request fits when count + cost <= limit.

    Hot-key options (shards, leases) exist for GCRA only: the members are here so
    that validation refuses them by name (``kinds.sliding``), and they are never
    written when unset.
    """

    dimension: Dimension  #: what the window counts per
    limit: int  #: requests' worth admitted per window
    window: int  #: seconds, one of PERIODS
    cost: int | None = None  #: requests' worth per request; None means the route's cost
    shadow: bool = False  #: evaluated and reported, never rejects
    shards: int = 1  #: refused when not 1 (GCRA only)
    lease: int = 0  #: refused when not 0 (GCRA only)
    lease_ms: int = DEFAULT_LEASE_MS  #: refused when set (GCRA only)
    name: str = ""  #: public name (:func:`public_name`); empty: derived
    description: str = ""  #: public description; empty: derived

    @property
    def period(self) -> int:
        """The window, under the name every rate limit's key is built from."""
        return self.window

    @property
    def hot(self) -> bool:
        """Whether a hot-key option is set (never valid for a sliding window)."""
        return self.shards > 1 or self.lease > 0

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": "sliding_window",
            "dimension": self.dimension.value,
            "limit": self.limit,
            "window": self.window,
            "cost": self.cost,
            "shadow": self.shadow,
        }
        _hot_members(self, data)
        _public_members(self, data)
        return data

    def sort_key(self) -> tuple[str, int, int, int, bool]:
        return (self.dimension, self.window, self.limit, self.cost or 0, self.shadow)


#: A calendar quota's periods, and the seconds of one, nominally (for comparing
#: limits: a month is 1/12 of the Gregorian year; the boundaries are the calendar's)
QUOTA_PERIODS: Mapping[str, int] = {"day": 86_400, "month": 2_629_746}
#: Where a quota's months start: the 1st, or the tenant's billing day
QUOTA_CYCLES = ("calendar", "billing")


@dataclass(frozen=True, slots=True)
class CalendarQuota:
    """At most ``limit`` requests' worth per calendar ``per`` (day or month), per key
    (kind ``calendar_quota``), reset at local midnight in the tenant's time zone;
    a ``billing`` cycle runs monthly from the tenant's billing day
    (:mod:`.calendar`, ``Rules.calendars``). Redis server time decides.

    No hot-key options: ``shards`` and ``lease`` read as unset, so that code
    asking any rate limit for them needs no case for quotas.
    """

    dimension: Dimension  #: what the quota counts per
    limit: int  #: requests' worth admitted per period
    per: str  #: "day" or "month" (QUOTA_PERIODS)
    cycle: str = "calendar"  #: "calendar" or "billing" (per month only)
    cost: int | None = None  #: requests' worth per request; None means the route's cost
    shadow: bool = False  #: evaluated and reported, never rejects
    name: str = ""  #: public name (:func:`public_name`); empty: derived
    description: str = ""  #: public description; empty: derived

    @property
    def period(self) -> str:
        """The key's period part: ``day``, ``month`` or ``month-billing``."""
        return self.per if self.cycle == "calendar" else f"{self.per}-{self.cycle}"

    @property
    def shards(self) -> int:
        return 1

    @property
    def lease(self) -> int:
        return 0

    @property
    def lease_ms(self) -> int:
        return DEFAULT_LEASE_MS

    @property
    def hot(self) -> bool:
        return False

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "kind": "calendar_quota",
            "dimension": self.dimension.value,
            "limit": self.limit,
            "per": self.per,
            "cost": self.cost,
            "shadow": self.shadow,
        }
        if self.cycle != "calendar":  # the default is left out of canonical JSON
            data["cycle"] = self.cycle
        _public_members(self, data)
        return data

    def sort_key(self) -> tuple[str, int, str, int, int, bool]:
        return (
            self.dimension,
            QUOTA_PERIODS.get(self.per, 0),
            self.cycle,
            self.limit,
            self.cost or 0,
            self.shadow,
        )


#: A limit on the rate of requests, of any kind (what ``Policy.limits`` holds).
RateLimit = Limit | SlidingWindow | CalendarQuota


@dataclass(frozen=True, slots=True)
class ConcurrencyLimit:
    """At most ``max_inflight`` requests in flight at once per key (a limit of kind "concurrent").

    A gateway acquires a slot before the request and releases it when the
    response ends; a slot that is never released (a crashed gateway) expires
    after ``timeout`` seconds, so the cap heals by itself. The timeout must
    exceed the longest legitimate request: a longer one stops being counted.
    """

    dimension: Dimension
    max_inflight: int  #: requests in flight at once per key
    timeout: int = DEFAULT_TIMEOUT  #: seconds before an unreleased slot expires
    shadow: bool = False  #: counted and reported, never rejects
    name: str = ""  #: public name (:func:`public_name`); empty: derived
    description: str = ""  #: public description; empty: derived

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "dimension": self.dimension.value,
            "max_inflight": self.max_inflight,
            "timeout": self.timeout,
            "shadow": self.shadow,
        }
        _public_members(self, data)
        return data

    def sort_key(self) -> tuple[str, int, int, bool]:
        return (self.dimension, self.max_inflight, self.timeout, self.shadow)


def _hot_members(limit: Limit | SlidingWindow, data: dict[str, Any]) -> None:
    """The hot-key options, written only when set: snapshots without them keep their
    bytes (a sliding window carries them only for validation to refuse them)."""
    if limit.shards != 1:
        data["shards"] = limit.shards
    if limit.lease:
        data["lease"] = limit.lease
    if limit.lease_ms != DEFAULT_LEASE_MS:
        data["lease_ms"] = limit.lease_ms


def _public_members(limit: RateLimit | ConcurrencyLimit, data: dict[str, Any]) -> None:
    """Optional members, written only when set: snapshots without them keep their bytes."""
    if limit.name:
        data["name"] = limit.name
    if limit.description:
        data["description"] = limit.description


def describe_limit(limit: RateLimit | ConcurrencyLimit) -> str:
    """Say a limit the way people do: ``per user: 100 / s, burst 200``, each kind in
    its own words (:meth:`.LimitKind.terse`): ``per user: 100 requests per minute,
    sliding window``."""
    subject = f"per {limit.dimension.value.replace('_', ' ')}"
    text = f"{subject}: {_words(limit)[0]}"
    return text + (" (shadow)" if limit.shadow else "")


#: Periods and subjects as a customer reads them (``limit_in_words``).
PERIOD_WORDS: Mapping[int, str] = {
    1: "second",
    60: "minute",
    3600: "hour",
    86400: "day",
}
_SUBJECT_WORDS: Mapping[Dimension, str] = {
    Dimension.TENANT: "per account",
    Dimension.USER: "per user",
    Dimension.API_KEY: "per API key",
    Dimension.IP: "per IP address",
}


def requests_phrase(count: int) -> str:
    """``1 request``, ``10,000 requests``."""
    return f"{count:,} request" + ("" if count == 1 else "s")


def limit_in_words(limit: RateLimit | ConcurrencyLimit) -> str:
    """Say a limit as its customers read it: ``2 requests per second per user, bursts of 5``.

    The default public description of a limit: the 429's ``detail``, the tenant
    page and the changelog say a limit this way unless it was given its own.
    """
    text = _words(limit)[1](_SUBJECT_WORDS[limit.dimension])
    cost = getattr(limit, "cost", None)
    if cost is not None and cost != 1:
        text += f"; each request counts as {cost:,}"
    return text


def cost_phrase(limit: Any) -> str:
    """``, cost 5`` for a rate limit with its own cost, else nothing (terse words)."""
    return "" if limit.cost is None else f", cost {limit.cost}"


def _cap_terse(limit: ConcurrencyLimit) -> str:
    text = f"at most {limit.max_inflight:,} in flight"
    return text + f" (released after {limit.timeout:,} s at most)"


def _cap_public(limit: ConcurrencyLimit, subject: str) -> str:
    return f"at most {requests_phrase(limit.max_inflight)} in flight {subject}"


def _words(limit: RateLimit | ConcurrencyLimit) -> tuple[str, Callable[[str], str]]:
    """A limit's terse words, and how to say it to customers given its subject: a
    concurrency cap's here, a rate limit's by its kind (``LimitKind.terse`` and
    ``in_words``), so a new kind brings its words with it."""
    if isinstance(limit, ConcurrencyLimit):
        return _cap_terse(limit), lambda subject: _cap_public(limit, subject)
    from sluice.kinds import kind_of  # the kinds import this module's value types

    kind = kind_of(limit)
    return kind.terse(limit), lambda subject: kind.in_words(limit, subject)


def public_name(limit: RateLimit | ConcurrencyLimit) -> str:
    """The limit's name for customers: its own, else its kind's noun and subject,
    ``Rate limit per user``, ``Monthly quota per account``."""
    if limit.name:
        return limit.name
    if isinstance(limit, ConcurrencyLimit):
        noun = "Concurrency limit"
    else:
        from sluice.kinds import kind_of  # the kinds import this module's value types

        noun = kind_of(limit).noun(limit)
    return f"{noun} {_SUBJECT_WORDS[limit.dimension]}"


def public_description(limit: RateLimit | ConcurrencyLimit) -> str:
    """The limit for customers: its own description, else :func:`limit_in_words`."""
    return limit.description or limit_in_words(limit)
