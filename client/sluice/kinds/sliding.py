"""The sliding-window counter (Cloudflare's weighted pair of fixed windows) as a
:class:`~.base.LimitKind`: "100 per minute" read literally.

A key holds two counts, this window's and the previous one's (requests' worth,
``lua/token_bucket.lua``'s sliding branch). At ``elapsed`` µs into the window
the count is ``previous x (window - elapsed) / window + current``, and a request
of ``cost`` fits when ``count + cost <= limit``.

The state a reply carries is a duration, as the simulations need (they keep a
key's state as a moment): measured in ``tick = ceil(window / limit)`` µs per
request, it reads like a GCRA debt of the same limit, so the same arithmetic
gives ``remaining`` and ``fits``:

- while a request would fit, ``ceil(count x tick)``: the count, drained at the
  nominal rate; at most ``(limit - cost) x tick``;
- once it would not, ``wait + (limit - cost) x tick``, where ``wait`` is the
  exact time until it fits (the previous window's share running down, then
  this window's turn): ``Retry-After`` is exact.

Every method of :class:`Sliding` is the GCRA :class:`~.gcra.Geometry`'s with
``increment = cost x tick`` and ``capacity = limit x tick`` (the nginx module
reads the state with that arithmetic). The local failure mode so runs a window
as a bucket refilling ``limit`` per window, ``limit`` deep: close to the
window's rule, not the rule. Once the window is full the state depends on the
cost, so the rejected-keys cache keeps the moment a rejected request fits and
answers only for requests at least as costly (``sluice.hotkeys``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from sluice import reading
from sluice.quota import (
    PERIOD_WORDS,
    PERIODS,
    Dimension,
    SlidingWindow,
    cost_phrase,
    requests_phrase,
)

from .base import Advertised, Counted, Direction
from .gcra import hot_options

__all__ = ["SLIDING_WINDOW", "Sliding", "SlidingKind", "sliding_count", "sliding_state"]

_MICROS = 1_000_000
_KEYS = {"kind", "dimension", "limit", "window", "cost", "shadow"}
_HOT = "hot-key options (shards, leases) are for GCRA limits only: a sliding window is one key"


@dataclass(frozen=True, slots=True)
class Sliding(Counted):
    """A sliding window in script units for one request cost."""

    cost: int  #: requests' worth one request adds
    limit: int  #: requests' worth a window admits
    window: int  #: µs
    tick: int  #: µs per request's worth in the state: ceil(window / limit)

    def reset(self, state: int, now: int = 0) -> int:
        """µs until the count has drained, at the nominal rate."""
        return state


def sliding_count(shape: Sliding, previous: int, current: int, elapsed: int) -> float:
    """The weighted count of a key at ``elapsed`` µs into its window, in the
    script's order of float operations (Redis's Lua numbers are doubles), so the
    memory store replies what Redis does. A request fits when count + cost <= limit."""
    return float(previous) * (shape.window - elapsed) / shape.window + current


def sliding_state(shape: Sliding, previous: int, current: int, elapsed: int) -> int:
    """The state (see the module) of a key holding ``previous`` and ``current``
    (after the decision) at ``elapsed`` µs into the window: ``lua/token_bucket.lua``'s."""
    window, cost, limit, tick = shape.window, shape.cost, shape.limit, shape.tick
    count = sliding_count(shape, previous, current, elapsed)
    room = limit - cost
    if count + cost <= limit:
        return math.ceil(count * tick)
    if current <= room:  # the previous window's share runs down first
        wait = (window - elapsed) - (room - current) * window / previous
    else:  # this window's count becomes the previous one's and runs down
        wait = (window - elapsed) + window - room * window / current
    return max(1, math.ceil(wait)) + room * tick


def _window_us(limit: SlidingWindow) -> int:
    return limit.window * _MICROS


class SlidingKind:
    """The sliding-window counter (:class:`~.quota.SlidingWindow`)."""

    name = "sliding_window"
    limit_type = SlidingWindow

    def parse(self, data: Any, path: str) -> SlidingWindow:
        """A window (``SlidingWindow.to_json``); hot-key options read for validation
        to refuse them by name."""
        obj = reading.members(
            data, path, _KEYS, {"shards", "lease", "lease_ms", *reading.PUBLIC}
        )
        shards, lease, lease_ms = hot_options(obj, path)
        return SlidingWindow(
            dimension=reading.choice(Dimension, obj["dimension"], f"{path}.dimension"),
            limit=reading.integer(obj["limit"], f"{path}.limit", minimum=1),
            window=reading.period(obj["window"], f"{path}.window"),
            cost=reading.cost(obj, path),
            shadow=reading.boolean(obj["shadow"], f"{path}.shadow"),
            shards=shards,
            lease=lease,
            lease_ms=lease_ms,
            **reading.public(obj, path),
        )

    def problems(self, limit: SlidingWindow, *, cost: int) -> list[tuple[str, str]]:
        """A window that holds the request cost, and no hot-key option."""
        errors = []
        if limit.limit < cost:
            errors.append(
                (
                    ".limit",
                    f"limit {limit.limit} is below the request cost {cost}: "
                    "such requests could never pass",
                )
            )
        if limit.shards != 1:
            errors.append((".shards", _HOT))
        if limit.lease:
            errors.append((".lease", _HOT))
        return errors

    def shape(self, limit: SlidingWindow, *, cost: int, share: int = 1) -> Sliding:
        """The window's numbers; ``share`` divides the limit (never below one request)."""
        held = max(cost, limit.limit // share)
        window = _window_us(limit)
        return Sliding(
            cost, held, window, math.ceil(window / held)
        )  # as the script does

    def arguments(self, shape: Sliding, *, flag: bytes) -> tuple[bytes, ...]:
        """cost, limit and the flag followed by ``w`` and the window in µs: the
        sliding branch of ``lua/token_bucket.lua`` (three ARGV per limit, as GCRA)."""
        return (
            b"%d" % shape.cost,
            b"%d" % shape.limit,
            b"%sw%d" % (flag, shape.window),
        )

    def advertised(self, limit: SlidingWindow, shape: Sliding) -> Advertised:
        """``<dimension>-<window unit>-sliding``, q = the limit, w = the window."""
        return Advertised(
            f"{limit.dimension.value}-{PERIODS[limit.window]}-sliding",
            shape.limit,
            limit.window,
        )

    def noun(self, limit: SlidingWindow) -> str:
        """``Rate limit``: a window is a rate to customers."""
        return "Rate limit"

    def terse(self, limit: SlidingWindow) -> str:
        """``100 requests per minute, sliding window``, then its cost."""
        text = f"{requests_phrase(limit.limit)} per {PERIOD_WORDS[limit.window]}"
        return text + ", sliding window" + cost_phrase(limit)

    def in_words(self, limit: SlidingWindow, subject: str) -> str:
        """``100 requests in any minute per user``: no burst, any window holds at
        most the limit."""
        window = PERIOD_WORDS[limit.window]
        return f"{requests_phrase(limit.limit)} in any {window} {subject}"

    def direction(
        self, before: SlidingWindow, after: SlidingWindow, *, route_cost: int
    ) -> Direction:
        """Against the client: fewer requests per window, the same limit over a
        longer window, a higher cost per request."""
        # requests per second, compared without rounding: limit / window
        rate_before, rate_after = (
            before.limit * after.window,
            after.limit * before.window,
        )
        cost_before = before.cost or route_cost
        cost_after = after.cost or route_cost
        if after.limit < before.limit or rate_after < rate_before:
            return Direction.LOWERED
        if cost_after > cost_before:
            return Direction.LOWERED
        if after.limit > before.limit or rate_after > rate_before:
            return Direction.RAISED
        if cost_after < cost_before:
            return Direction.RAISED
        return Direction.UNCHANGED


#: The one sliding-window kind (kinds hold no state).
SLIDING_WINDOW = SlidingKind()
