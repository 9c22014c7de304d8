"""GCRA, the token bucket Sluice has always enforced, as a :class:`~.base.LimitKind`.

A bucket is one integer in Redis, its theoretical arrival time (TAT) in µs of
Redis time; its state in a reply is its debt, ``max(TAT - now, 0)``: how long
until it is full again. The rule, here and in ``lua/token_bucket.lua``,
``lua/hot.lua`` and ``lua/charge.lua``: a request fits when
``debt + increment <= capacity``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sluice import reading
from sluice.quota import (
    DEFAULT_LEASE_MS,
    MAX_LEASE_MS,
    MAX_SHARDS,
    PERIOD_WORDS,
    PERIODS,
    Dimension,
    Limit,
    cost_phrase,
    requests_phrase,
)

from .base import Advertised, Direction

__all__ = ["GCRA", "Gcra", "Geometry", "admits", "geometry"]

_MICROS = 1_000_000


def admits(debt: int, increment: int, capacity: int) -> bool:
    """The rule of the bucket: a request of ``increment`` fits a bucket owing ``debt``."""
    return debt + increment <= capacity


@dataclass(frozen=True, slots=True)
class Geometry:
    """A bucket in the script's units: integer microseconds of refill time."""

    tick: int  #: refill time of one token: ceil(period / rate), at least 1 µs
    increment: int  #: refill time one request takes: cost x tick
    capacity: int  #: refill time of a full bucket: burst x tick

    def fits(self, debt: int) -> bool:
        """Whether a request fits a bucket that owes ``debt`` µs (:func:`admits`)."""
        return debt + self.increment <= self.capacity

    def charged(self, debt: int) -> int:
        """The debt once a request that fits is charged."""
        return debt + self.increment

    def remaining(self, debt: int) -> int:
        """Whole tokens in a bucket that owes ``debt`` µs of refill."""
        left = (self.capacity - debt) // self.tick
        return left if left > 0 else 0  # not max(): this runs per limit per decision

    def wait(self, debt: int) -> int:
        """µs until a request fits a bucket that owes ``debt`` (0 when it fits now)."""
        wait = debt + self.increment - self.capacity
        return wait if wait > 0 else 0

    def waiting(self, wait: int) -> int:
        """The debt of a bucket where a request waits ``wait`` µs."""
        return wait + self.capacity - self.increment

    def reset(self, debt: int, now: int = 0) -> int:
        """µs until the bucket is full: its debt."""
        return debt


def geometry(limit: Limit, *, cost: int, share: int = 1) -> Geometry:
    """Return the geometry of ``limit`` for requests of ``cost`` tokens.

    ``share`` divides the limit (the local fallback gives each of ``share``
    gateways a ``1/share`` of the rate and of the burst, never below one
    request). Rounding the tick up keeps the bucket on the strict side: the
    rate enforced is ``period / tick <= rate`` (a key cannot pass more than one
    million tokens per second; past ~10k per second the rounding shows).
    """
    tick = max(1, math.ceil(limit.period * _MICROS * share / limit.rate))
    burst = max(cost, limit.burst // share)
    return Geometry(tick=tick, increment=cost * tick, capacity=burst * tick)


class Gcra:
    """The token bucket (:class:`~.quota.Limit`): rate per period, burst deep."""

    name = "gcra"
    limit_type = Limit

    def parse(self, data: Any, path: str) -> Limit:
        """A bucket (``Limit.to_json``; ``kind`` optional: absent in every snapshot
        before kinds); the hot-key options written only when set."""
        obj = reading.members(data, path, _KEYS, _OPTIONAL)
        shards, lease, lease_ms = hot_options(obj, path)
        return Limit(
            dimension=reading.choice(Dimension, obj["dimension"], f"{path}.dimension"),
            rate=reading.integer(obj["rate"], f"{path}.rate", minimum=1),
            period=reading.period(obj["period"], f"{path}.period"),
            burst=reading.integer(obj["burst"], f"{path}.burst", minimum=1),
            cost=reading.cost(obj, path),
            shadow=reading.boolean(obj["shadow"], f"{path}.shadow"),
            shards=shards,
            lease=lease,
            lease_ms=lease_ms,
            **reading.public(obj, path),
        )

    def problems(self, limit: Limit, *, cost: int) -> list[tuple[str, str]]:
        """Depth for the request cost, and the hot-key options (shards, leases)."""
        if limit.burst < cost:
            return [
                (
                    ".burst",
                    f"burst {limit.burst} is below the request cost {cost}: "
                    "such requests could never pass",
                )
            ]
        return _shard_errors(limit, cost) + _lease_errors(limit)

    def shape(self, limit: Limit, *, cost: int, share: int = 1) -> Geometry:
        """The bucket's geometry; a sharded limit is divided by its shards too."""
        return geometry(limit, cost=cost, share=share * limit.shards)

    def arguments(self, shape: Geometry, *, flag: bytes) -> tuple[bytes, ...]:
        """increment, capacity (µs) and the flag: ``lua/token_bucket.lua``'s ARGV."""
        return (b"%d" % shape.increment, b"%d" % shape.capacity, flag)

    def advertised(self, limit: Limit, shape: Geometry) -> Advertised:
        """``<dimension>-<period unit>``, the whole bucket (all shards), and the time
        to refill it, rounded up so that q / w never overstates the rate."""
        return Advertised(
            f"{limit.dimension.value}-{PERIODS[limit.period]}",
            shape.capacity // shape.tick * limit.shards,
            -(-shape.capacity // _MICROS),
        )

    def noun(self, limit: Limit) -> str:
        """``Rate limit``."""
        return "Rate limit"

    def terse(self, limit: Limit) -> str:
        """``100 / s, burst 200``, then its cost and hot-key options."""
        text = f"{limit.rate:,} / {PERIODS[limit.period]}, burst {limit.burst:,}"
        text += cost_phrase(limit)
        if limit.shards > 1:
            text += f", {limit.shards} shards"
        if limit.lease:
            text += f", leases of {limit.lease:,} for {limit.lease_ms:,} ms"
        return text

    def in_words(self, limit: Limit, subject: str) -> str:
        """``2 requests per second per user, bursts of 5``."""
        text = f"{requests_phrase(limit.rate)} per {PERIOD_WORDS[limit.period]}"
        return f"{text} {subject}, bursts of {limit.burst:,}"

    def direction(self, before: Limit, after: Limit, *, route_cost: int) -> Direction:
        """Against the client: a lower rate, a smaller burst, a higher cost per request."""
        cost_before = before.cost or route_cost
        cost_after = after.cost or route_cost
        if after.rate < before.rate or after.burst < before.burst:
            return Direction.LOWERED
        if cost_after > cost_before:
            return Direction.LOWERED
        if after.rate > before.rate or after.burst > before.burst:
            return Direction.RAISED
        if cost_after < cost_before:
            return Direction.RAISED
        return Direction.UNCHANGED


_KEYS = {"dimension", "rate", "period", "burst", "cost", "shadow"}
_OPTIONAL = {"kind", "shards", "lease", "lease_ms", *reading.PUBLIC}


def hot_options(obj: dict[str, Any], path: str) -> tuple[int, int, int]:
    """shards, lease and lease_ms of a limit's JSON, at their defaults when absent
    (a sliding window reads them too, for validation to refuse them by name)."""
    return (
        reading.integer(obj.get("shards", 1), f"{path}.shards", minimum=1),
        reading.integer(obj.get("lease", 0), f"{path}.lease", minimum=0),
        reading.integer(
            obj.get("lease_ms", DEFAULT_LEASE_MS), f"{path}.lease_ms", minimum=1
        ),
    )


def _shard_errors(limit: Limit, cost: int) -> list[tuple[str, str]]:
    if limit.shards > MAX_SHARDS:
        return [(".shards", f"at most {MAX_SHARDS} shards")]
    if limit.burst // limit.shards < cost:
        held = limit.burst // limit.shards
        return [
            (
                ".shards",
                f"each of {limit.shards} shards would hold {held} "
                f"tokens, below the request cost {cost}",
            )
        ]
    return []


def _lease_errors(limit: Limit) -> list[tuple[str, str]]:
    errors = []
    if limit.lease and limit.shards > 1:
        errors.append((".lease", "a limit is either sharded or leased, not both"))
    if limit.lease and limit.shadow:
        errors.append((".lease", "a shadow limit cannot be leased"))
    if limit.lease > limit.burst:
        errors.append((".lease", f"a lease cannot exceed the burst ({limit.burst})"))
    if limit.lease_ms > MAX_LEASE_MS:
        errors.append((".lease_ms", f"at most {MAX_LEASE_MS} ms"))
    return errors


#: The one GCRA kind (kinds hold no state).
GCRA = Gcra()
