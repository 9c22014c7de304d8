"""Recorded traffic replayed through token buckets: pure arithmetic, no queries.

The estimate (``limits.traffic.estimate``) reads what was recorded and asks two
questions of it here:

* :func:`could_reject`: can these limits reject anything of a tenant's traffic
  at all, judged from a few maxima (busiest second, minute, hour, day)? When
  the answer is no, it is certain, and the traffic is not replayed.
* :func:`replay`: how many requests the limits would have rejected, minute by
  minute. The buckets are the GCRA kind's (``sluice.model.geometry``: the
  tick, increment and capacity in microseconds the Lua script uses); a request
  fits when ``debt + increment <= capacity`` for every limit, and a rejected
  request charges no bucket, as in ``token_bucket.lua``. The replay is GCRA's
  alone: it steps whole seconds of requests at once, which a per-request
  simulation (:class:`sluice.kinds.Shape`) could not do at its speed.

How the replay can err (also in ``docs/stats.md``):

* Within a second, requests are taken as evenly spread, except at a burst's
  edges (a second quieter than its busier neighbour), where they are taken as
  arriving at the neighbour's rate next to it. Bursts shorter than a second,
  or whose edges the counts do not show, are smoothed: per-second limits are
  where it shows, and the estimate then tends to be low (by about 2 to 6 % in
  simulations of bursts of a few seconds at random phase, up to 10 %).
* A minute whose requests could not reject even if they all came at once is
  stepped whole, as if its requests had come evenly: the bucket it leaves is
  the average case, not the worst. An hour whose traffic the limits would admit
  whole from a full bucket (:func:`could_reject` says no) is stepped whole the
  same way (:class:`Quiet`), even right after a busy hour.
* Minutes recorded without their seconds (before peaks were kept) are spread
  evenly over the minute.
* A limit counted per user, API key or IP is replayed as if the tenant's whole
  traffic were one client: an upper bound (the split is not recorded).
* Requests rejected today are replayed too, as if their clients had sent them
  anyway; clients that back off after a 429 would send fewer.
* Calendar quotas (per day or month) are not buckets: the estimate counts them
  over the recorded local days, or projects a month (``limits.traffic.quotas``),
  from the minutes this replay finds its buckets rejecting (``Replayed.lost``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sluice.model import (
    SLIDING_WINDOW,
    CalendarQuota,
    Dimension,
    Policy,
    SlidingWindow,
    geometry,
)

__all__ = [
    "Bucket",
    "Minute",
    "Quiet",
    "Replayed",
    "buckets_of",
    "could_reject",
    "quotas_of",
    "replay",
]

_SECOND = 1_000_000  #: microseconds, the script's unit
_MINUTE = 60 * _SECOND
#: The windows :func:`could_reject` knows the busiest of, in seconds.
WINDOWS = (1, 60, 3600, 86400)


@dataclass(frozen=True, slots=True)
class Bucket:
    """One enforced limit of a policy, in the script's units (microseconds of refill)."""

    increment: int  #: refill time one request takes
    capacity: int  #: refill time of a full bucket
    per_tenant: bool  #: counted per tenant; otherwise the replay is an upper bound


def buckets_of(policy: Policy, *, route_cost: int) -> tuple[Bucket, ...]:
    """The enforced (non-shadow) limits of ``policy`` as buckets; shadow limits never
    reject, and calendar quotas are not buckets (:func:`quotas_of`)."""
    buckets = []
    for limit in policy.limits:
        if limit.shadow or isinstance(limit, CalendarQuota):
            continue
        cost = limit.cost or route_cost
        if isinstance(limit, SlidingWindow):
            # Replayed as the simulations run a window: a bucket of limit / window,
            # limit deep (docs/limit-kinds.md), close to the window's rule.
            window = SLIDING_WINDOW.shape(limit, cost=cost)
            increment, capacity = window.cost * window.tick, window.limit * window.tick
        else:
            shape = geometry(limit, cost=cost)
            increment, capacity = shape.increment, shape.capacity
        buckets.append(Bucket(increment, capacity, limit.dimension == Dimension.TENANT))
    return tuple(buckets)


def quotas_of(policy: Policy) -> tuple[CalendarQuota, ...]:
    """The enforced calendar quotas of ``policy``, which :func:`buckets_of` leaves out."""
    return tuple(
        limit
        for limit in policy.limits
        if isinstance(limit, CalendarQuota) and not limit.shadow
    )


@dataclass(frozen=True, slots=True)
class Minute:
    """The requests of one minute of one tenant and route."""

    at: int  #: minutes since the epoch
    count: int  #: requests, every outcome
    seconds: Sequence[int] | None = None  #: per-second counts; None: not recorded


@dataclass(frozen=True, slots=True)
class Quiet:
    """A stretch of minutes the limits admit whole: only its total is needed."""

    at: int  #: its first minute, since the epoch
    minutes: int  #: its length
    count: int  #: requests in it


@dataclass(frozen=True, slots=True)
class Replayed:
    """What a replay found."""

    seen: int  #: requests replayed
    rejected: int  #: of them, rejected by the buckets
    worst_minute: int | None  #: the minute (since the epoch) with most rejections
    worst_rejected: int  #: rejections in that minute
    #: rejections per minute (since the epoch), minutes without any left out: what
    #: a calendar quota's count must not include (a rejected request charges nothing)
    lost: dict[int, int]


def could_reject(buckets: Iterable[Bucket], busiest: Sequence[int]) -> bool:
    """Whether ``buckets`` may reject any request of traffic whose busiest aligned
    second, minute, hour and day (``busiest``, requests, in the order of ``WINDOWS``)
    are known.

    False is certain: a window of ``g`` seconds holding at most ``M`` requests
    puts at most ``(L / g + 2) M`` requests in any stretch of ``L`` seconds, which
    a bucket admits whole when ``M`` requests refill within ``g`` seconds and two
    windows' worth fit in its capacity.
    """
    for bucket in buckets:
        safe = any(
            most * bucket.increment <= window * _SECOND
            and 2 * most * bucket.increment <= bucket.capacity
            for window, most in zip(WINDOWS, busiest, strict=True)
        )
        if not safe:
            return True
    return False


def _spread(count: int) -> list[int]:
    share, extra = divmod(count, 60)
    return [share + (1 if second < extra else 0) for second in range(60)]


def replay(steps: Iterable[Minute | Quiet], buckets: Sequence[Bucket]) -> Replayed:
    """Replay ``steps`` (in time order) through ``buckets``, all full at the start."""
    debts = [0] * len(buckets)
    clock: int | None = None
    seen = rejected = worst_rejected = 0
    worst_minute = None
    lost_in: dict[int, int] = {}
    for minute in steps:
        start = minute.at * _MINUTE
        if clock is not None and start > clock:
            debts = [max(0, debt - (start - clock)) for debt in debts]
        seen += minute.count
        if isinstance(minute, Quiet):
            length = minute.minutes * _MINUTE
            clock = start + length
            debts = [
                max(0, debt + minute.count * bucket.increment - length)
                for debt, bucket in zip(debts, buckets, strict=True)
            ]
            continue
        clock = start + _MINUTE
        if all(
            debt + minute.count * bucket.increment <= bucket.capacity
            for debt, bucket in zip(debts, buckets, strict=True)
        ):  # nothing of this minute can be rejected, however its requests came
            debts = [
                max(0, debt + minute.count * bucket.increment - _MINUTE)
                for debt, bucket in zip(debts, buckets, strict=True)
            ]
            continue
        lost = _replay_seconds(minute.seconds or _spread(minute.count), debts, buckets)
        rejected += lost
        if lost:
            lost_in[minute.at] = lost
        if lost > worst_rejected:
            worst_minute, worst_rejected = minute.at, lost
    return Replayed(seen, rejected, worst_minute, worst_rejected, lost_in)


def _active(seconds: Sequence[int], j: int) -> tuple[int, int]:
    """(idle µs before, µs active) of second ``j``: when its requests came.

    Rates change over seconds, not at their boundaries: a second quieter than
    the next and not quieter than the previous is where a burst begins, so its
    requests are taken as arriving at its end at the next second's rate (and the
    mirror image where a burst ends). Otherwise they are spread over the whole
    second. Spreading a burst's edges over whole seconds would lend the bucket
    up to a second's refill per edge.
    """
    count = seconds[j]
    before = seconds[j - 1] if j else 0
    after = seconds[j + 1] if j + 1 < len(seconds) else 0
    if after > count >= before:
        active = _SECOND * count // after
        return _SECOND - active, active
    if before > count >= after:
        return 0, _SECOND * count // before
    return 0, _SECOND


def _replay_seconds(
    seconds: Sequence[int], debts: list[int], buckets: Sequence[Bucket]
) -> int:
    """Step one minute second by second (``debts`` updated in place); return rejections.

    ``n`` requests evenly spread over ``active`` µs of a second (:func:`_active`)
    arrive at ``idle + (k + 1/2) active / n``; by the last of them a bucket has
    drained ``idle`` and refilled ``active (n - 1/2) / n``, so it admits
    ``(capacity - debt + that refill) // increment`` of them at most.
    """
    if len(buckets) == 1:  # most policies: the same steps, inlined (the hot loop)
        debts[0], rejected = _one_bucket(seconds, debts[0], buckets[0])
        return rejected
    rejected = 0
    for j, count in enumerate(seconds):
        admitted = count
        if count:
            idle, active = _active(seconds, j)
            refill = active - active // (2 * count)
            for debt, bucket in zip(debts, buckets, strict=True):
                room = (
                    bucket.capacity - max(0, debt - idle) + refill
                ) // bucket.increment
                admitted = min(admitted, max(0, room))
            rejected += count - admitted
        for i, bucket in enumerate(buckets):
            debts[i] = min(
                bucket.capacity,
                max(0, debts[i] + admitted * bucket.increment - _SECOND),
            )
    return rejected


def _one_bucket(seconds: Sequence[int], debt: int, bucket: Bucket) -> tuple[int, int]:
    """:func:`_replay_seconds` for one bucket, :func:`_active` inlined: (debt after the
    minute, rejections)."""
    increment, capacity, second = bucket.increment, bucket.capacity, _SECOND
    rejected = before = 0
    for count, after in zip(seconds, [*seconds[1:], 0], strict=True):
        if count:
            drained = debt
            if after > count >= before:
                active = second * count // after
                drained = debt - second + active
                if drained < 0:
                    drained = 0
            elif before > count >= after:
                active = second * count // before
            else:
                active = second
            room = (capacity - drained + active - active // (2 * count)) // increment
            if room < count:
                if room < 0:
                    room = 0
                rejected += count - room
                count_in = room
            else:
                count_in = count
            debt += count_in * increment - second
            if debt > capacity:
                debt = capacity
            elif debt < 0:
                debt = 0
        else:
            debt = debt - second if debt > second else 0
        before = count
    return debt, rejected
