"""Limit kinds: GCRA as a LimitKind, and the seam proved by a kind written in a test.

The test kind, ``Spacing`` (one request per ``period`` seconds, no burst), is
what a newcomer writes (``docs/limit-kinds.md``): a value type and one
LimitKind. Its script branch is the token bucket's (a spacing is a bucket one
request deep), so it runs on the memory store as on Redis without Lua of its
own; everything else learns of it only through the seam.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from sluice import (
    Limiter,
    LocalBuckets,
    SnapshotError,
    rate_limit_headers,
    reading,
    retry_after_seconds,
    validate_rules,
)
from sluice.kinds import (
    CALENDAR_QUOTA,
    GCRA,
    SLIDING_WINDOW,
    Advertised,
    Direction,
    kind_of,
    register,
    registered,
    unregister,
)
from sluice.kinds.gcra import Geometry, geometry
from sluice.memory import MemoryStore
from sluice.model import (
    Dimension,
    Limit,
    describe_limit,
    limit_in_words,
    parse_limit,
    parse_rules,
    public_name,
)
from sluice.plans import compile_policy
from sluice.testing import Clock
from tests.client.factories import limit, policy, rules, snapshot

_MICROS = 1_000_000


@dataclass(frozen=True, slots=True)
class Spacing:
    """At most one request per ``period`` seconds per key."""

    dimension: Dimension
    period: int  #: seconds between two requests
    cost: int | None = None
    shadow: bool = False
    shards: int = 1  # the members every limit has (no hot-key options here)
    lease: int = 0
    lease_ms: int = 1000
    name: str = ""
    description: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": "spacing",
            "dimension": self.dimension.value,
            "period": self.period,
        }

    def sort_key(self) -> tuple[str, int]:
        return (self.dimension, self.period)


@dataclass(frozen=True, slots=True)
class Gap:
    """A spacing in script units: the state is µs until the next request may pass."""

    gap: int

    def fits(self, state: int) -> bool:
        return state == 0

    def charged(self, state: int) -> int:
        return state + self.gap

    def remaining(self, state: int) -> int:
        return 1 if state == 0 else 0

    def wait(self, state: int) -> int:
        return state

    def waiting(self, wait: int) -> int:
        return wait

    def reset(self, state: int, now: int) -> int:
        return state


class SpacingKind:
    name = "spacing"
    limit_type = Spacing

    def parse(self, data: Any, path: str) -> Spacing:
        obj = reading.members(data, path, {"kind", "dimension", "period"})
        return Spacing(
            reading.choice(Dimension, obj["dimension"], f"{path}.dimension"),
            reading.integer(obj["period"], f"{path}.period", minimum=1),
        )

    def problems(self, limit: Spacing, *, cost: int) -> list[tuple[str, str]]:
        return [(".period", "at least 1 s")] if limit.period < 1 else []

    def shape(self, limit: Spacing, *, cost: int, share: int = 1) -> Gap:
        return Gap(limit.period * _MICROS * share)

    def arguments(self, shape: Gap, *, flag: bytes) -> tuple[bytes, ...]:
        # the token bucket's branch: a bucket exactly one request deep
        return (b"%d" % shape.gap, b"%d" % shape.gap, flag)

    def advertised(self, limit: Spacing, shape: Gap) -> Advertised:
        return Advertised(f"{limit.dimension.value}-spacing", 1, limit.period)

    def noun(self, limit: Spacing) -> str:
        return "Spacing"

    def terse(self, limit: Spacing) -> str:
        return f"one request per {limit.period} s"

    def in_words(self, limit: Spacing, subject: str) -> str:
        return f"one request every {limit.period} seconds {subject}"

    def direction(
        self, before: Spacing, after: Spacing, *, route_cost: int
    ) -> Direction:
        if after.period == before.period:
            return Direction.UNCHANGED
        return Direction.LOWERED if after.period > before.period else Direction.RAISED


@pytest.fixture
def spacing():
    kind = register(SpacingKind())
    yield kind
    unregister(kind)


def _spaced(seconds: int):
    return rules(policy("default", "search", Spacing(Dimension.IP, seconds)))


def test_kinds__a_kind_written_in_a_test__decides_end_to_end(spacing):
    # Given a registered kind and a policy of one request per 10 s per IP
    clock = Clock()
    limiter = Limiter(
        MemoryStore(clock=clock), snapshot(_spaced(10)), wall=clock, clock=clock
    )
    # When an IP sends three requests, the third 10 s after the first
    first = limiter.decide(route="search", ip="10.0.0.1")
    second = limiter.decide(route="search", ip="10.0.0.1")
    clock.advance(10)
    third = limiter.decide(route="search", ip="10.0.0.1")
    # Then the second waits out the spacing, and the headers say the kind's policy
    assert [first.allowed, second.allowed, third.allowed] == [True, False, True]
    assert second.retry_after == pytest.approx(10)
    headers = dict(rate_limit_headers(second, wall=clock))
    assert headers == {
        "RateLimit-Policy": '"ip-spacing";q=1;w=10',
        "RateLimit": '"ip-spacing";r=0;t=10',
    }
    assert retry_after_seconds(second) == 10


def test_kinds__a_kind_written_in_a_test__decides_on_redis(spacing, store):
    # Given a registered kind and a policy of one request per minute per IP, on Redis
    limiter = Limiter(store.client, snapshot(_spaced(60)))
    # When an IP sends two requests at once
    first = limiter.decide(route="search", ip="10.0.0.1")
    second = limiter.decide(route="search", ip="10.0.0.1")
    # Then the second is rejected until the minute has passed
    assert (first.allowed, second.allowed) == (True, False)
    assert 59 < second.retry_after <= 60
    assert second.deciding.name == "ip-spacing"


def test_kinds__a_kind_written_in_a_test__simulated_in_process(spacing):
    # Given the local failure mode's buckets and the kind's policy compiled
    clock = Clock(1_000.0)
    local = LocalBuckets(gateways=1, clock=clock)
    plan = compile_policy(policy("default", "search", Spacing(Dimension.IP, 5)), cost=1)
    # When a key asks twice, then again 5 s later
    replies = [local(["k"], plan)[0], local(["k"], plan)[0]]
    clock.advance(5)
    replies.append(local(["k"], plan)[0])
    # Then the in-process simulation is the kind's
    assert replies == [1, 0, 1]


def test_kinds__a_kind_written_in_a_test__validated_and_compared(spacing):
    # Given a rule set holding a spacing of 0 s
    problems = validate_rules(_spaced(0))
    # Then validation names the member at fault, from the kind
    assert [(p.field, p.message) for p in problems] == [
        ("limits[0].period", "at least 1 s")
    ]
    # And the kind says which way a change goes
    before, after = Spacing(Dimension.IP, 10), Spacing(Dimension.IP, 30)
    assert kind_of(before).direction(before, after, route_cost=1) is Direction.LOWERED
    # And the admin, the diff, the changelog and the 429 say it in the kind's words
    assert describe_limit(before) == "per ip: one request per 10 s"
    assert limit_in_words(before) == "one request every 10 seconds per IP address"
    assert public_name(before) == "Spacing per IP address"


def test_kinds__registering_a_second_kind_for_a_type__refused(spacing):
    class Again(SpacingKind):
        name = "again"

    with pytest.raises(ValueError, match="clashes"):
        register(Again())
    assert registered() == (GCRA, SLIDING_WINDOW, CALENDAR_QUOTA, spacing)


@pytest.mark.parametrize(
    ("after", "direction"),
    [
        (limit("ip", 10, 1, 20), Direction.UNCHANGED),
        (limit("ip", 9, 1, 20), Direction.LOWERED),
        (limit("ip", 10, 1, 19), Direction.LOWERED),
        (limit("ip", 10, 1, 20, cost=2), Direction.LOWERED),
        (limit("ip", 11, 1, 5), Direction.LOWERED),  # against the client wins
        (limit("ip", 11, 1, 20), Direction.RAISED),
        (limit("ip", 10, 1, 40), Direction.RAISED),
    ],
)
def test_gcra__direction__against_the_client_is_lowered(after, direction):
    # Given a bucket of 10 / s, burst 20, at the route's cost of 1
    before = limit("ip", 10, 1, 20)
    # Then a change's direction is GCRA's member-by-member rule
    assert GCRA.direction(before, after, route_cost=1) is direction


def test_gcra__shape_arguments_and_headers__the_scripts_units():
    # Given 100 per minute, burst 10, split in 2 shards, at a cost of 2
    bucket = Limit(Dimension.USER, 100, 60, 10, shards=2)
    shape = GCRA.shape(bucket, cost=2)
    # Then each shard holds half the burst, in µs of refill
    assert (
        shape
        == geometry(bucket, cost=2, share=2)
        == Geometry(1_200_000, 2_400_000, 6_000_000)
    )
    assert GCRA.arguments(shape, flag=b"0") == (b"2400000", b"6000000", b"0")
    assert GCRA.advertised(bucket, shape) == Advertised("user-min", 10, 6)
    # And it fits while a request's refill fits the capacity
    assert (shape.fits(3_600_000), shape.fits(3_600_001)) == (True, False)
    assert (shape.remaining(3_600_000), shape.wait(3_600_001)) == (2, 1)


def test_kinds__a_kind_written_in_a_test__parsed_from_a_snapshot(spacing):
    # Given rules holding the kind, written as a snapshot holds them
    document = _spaced(10).to_json()
    # Then the parser reads them back through the kind, without knowing it
    assert parse_rules(document) == _spaced(10)
    # and a bad member is named by its path, by the kind's own reading
    bad = {"kind": "spacing", "dimension": "ip", "period": 0}
    with pytest.raises(SnapshotError) as error:
        parse_limit(bad, "p.limits[0]")
    assert (error.value.path, error.value.message) == (
        "p.limits[0].period",
        "must be at least 1",
    )


def test_kinds__an_unknown_kind__names_the_registered_ones(spacing):
    with pytest.raises(SnapshotError) as error:
        parse_limit({"kind": "leaky"}, "p.limits[0]")
    assert error.value.path == "p.limits[0].kind"
    assert error.value.message == (
        "'leaky' is not one of: gcra, sliding_window, calendar_quota, spacing"
    )
