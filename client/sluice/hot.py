"""Decisions of policies with leases or concurrency limits (the ``hot.lua`` path),
and answers from the reject cache.

A decision here is two steps around one Redis call, shared by the sync and
asyncio limiters: :func:`hot_begin` spends leased tokens where it can and
returns either a finished :class:`~.decision.Decision` (every bucket paid from
leases and no slot to take: no Redis call at all) or the :class:`HotCall` to
send; :func:`hot_finish` turns the reply into the Decision, refills the lease
pools and, for an admitted request, records the slots it holds.
:func:`cached_rejection` answers a request the reject cache knows Redis would
refuse, with the same limits (and concurrency limits) a Redis answer shows.
"""

from __future__ import annotations

import time
from typing import NamedTuple

from .concurrency import slot_statuses
from .decision import Decision, Held, LimitStatus
from .engine import Engine, Prepared, bucket_statuses
from .hotkeys import PAID, REFILL, Leases, RejectCache
from .rehearsal import rehearsed

__all__ = ["HotCall", "cached_rejection", "hot_abort", "hot_begin", "hot_finish"]


class HotCall(NamedTuple):
    """What to send to ``hot.lua`` for one request, and what was spent before sending."""

    keys: list[str]  #: buckets, then in-flight sets
    args: list[bytes]
    roles: list[
        int | None
    ]  #: per bucket: its lease role (see Leases.take), None if unleased
    request_id: str


def hot_begin(
    engine: Engine,
    prepared: Prepared,
    leases: Leases,
    *,
    request_id: str,
    now: int,
    at: float = 0.0,
) -> Decision | HotCall:
    """Spend leased tokens; return the Decision (made at ``at``, store clock) when
    Redis is not needed, else the call."""
    plan, keys = prepared.plan, prepared.keys
    roles: list[int | None] = []
    debts: list[int] = []
    for index, limit_plan in enumerate(plan.limits):
        if limit_plan.lease:
            role, debt = leases.take(keys[index], limit_plan.geometry.increment, now)
        else:
            role, debt = None, 0
        roles.append(role)
        debts.append(debt)
    if not prepared.slots and all(role == PAID for role in roles):
        reply = [1]
        for debt in debts:
            reply += [1, debt]
        return engine.decision(prepared, reply, at=at)
    rehearsal = prepared.rehearsal  # never with leases: roles are all None then
    buckets = plan.args if rehearsal is None else rehearsal.plan.args
    count = len(buckets) // 3
    args = [request_id.encode(), b"%d" % count]
    for index in range(count):
        role = roles[index] if index < len(roles) else None
        want = (
            1
            if role is None
            else {PAID: 0, REFILL: plan.limits[index].lease}.get(role, 1)
        )
        args += [*buckets[3 * index : 3 * index + 3], b"%d" % want]
    for slot in plan.slots:
        args += slot.args
    beside = [] if rehearsal is None else rehearsal.keys
    return HotCall([*keys, *beside, *prepared.slots], args, roles, request_id)


def hot_finish(
    engine: Engine,
    prepared: Prepared,
    call: HotCall,
    reply: list[int],
    *,
    leases: Leases,
    rejections: RejectCache,
    now: int,
) -> Decision:
    """The Decision for ``reply`` to ``call``; settles leases and remembers rejections."""
    plan, admitted = prepared.plan, reply[0] == 1
    _settle(prepared, call, reply, leases, admitted=admitted, now=now)
    offset = 1 + 3 * (len(call.keys) - len(prepared.slots))  # rehearsed buckets too
    rejections.remember(plan, prepared.keys, reply, now, step=3)
    if not admitted:
        rejections.remember_slots(prepared.slots, reply, offset)
    statuses = bucket_statuses(plan, prepared.keys, reply, step=3)
    statuses += slot_statuses(plan, prepared.slots, reply, offset)
    rehearsal = prepared.rehearsal
    decision = engine.conclude(
        prepared,
        plan,
        statuses,
        admitted,
        at=reply[-1] / 1e6,
        rehearsed=None if rehearsal is None else rehearsed(rehearsal.plan, reply, 3),
    )
    if not admitted or not prepared.slots:
        return decision
    taken = tuple(
        key
        for index, key in enumerate(prepared.slots)
        if reply[offset + 2 * index] == 1
    )
    return decision._replace(held=Held(taken, call.request_id)) if taken else decision


def _settle(
    prepared: Prepared,
    call: HotCall,
    reply: list[int],
    leases: Leases,
    *,
    admitted: bool,
    now: int,
) -> None:
    """Tell the lease pools how the request ended (a refill, or tokens given back)."""
    for index, (limit_plan, role) in enumerate(
        zip(prepared.plan.limits, call.roles, strict=True)
    ):
        if role is not None:
            leases.settle(
                prepared.keys[index],
                role,
                increment=limit_plan.geometry.increment,
                admitted=admitted,
                granted=reply[3 * index + 3],
                debt=reply[3 * index + 2],
                now=now,
                lease_us=limit_plan.lease_us,
            )


def hot_abort(prepared: Prepared, call: HotCall, leases: Leases) -> None:
    """The call failed (Redis error): give back what :func:`hot_begin` spent."""
    for index, role in enumerate(call.roles):
        if role is not None:
            increment = prepared.plan.limits[index].geometry.increment
            leases.settle(
                prepared.keys[index], role, increment=increment, admitted=False
            )


def cached_rejection(
    engine: Engine, prepared: Prepared, rejections: RejectCache, *, now: int, at: float
) -> Decision | None:
    """The 429 the reject cache gives ``prepared`` (decided at ``at``), or None: ask Redis.

    Every limit of the policy is in it, as a Redis answer would have it: each
    with its last known state, paid down since; a limit the cache knows
    nothing of has ``remaining`` -1 (the headers leave it out of ``RateLimit``).
    """
    plan = prepared.plan
    reply = rejections.check(plan, prepared.keys, now)
    if reply is None:
        return None
    statuses = tuple(
        s if reply[2 + 2 * i] >= 0 else s._replace(remaining=-1, reset=0.0)
        for i, s in enumerate(
            bucket_statuses(
                plan, prepared.keys, reply, now=round((at or time.time()) * 1_000_000)
            )
        )
    )
    if prepared.slots:
        statuses += _known_slots(prepared, rejections)
    return engine.conclude(prepared, plan, statuses, False, at=at)


def _known_slots(
    prepared: Prepared, rejections: RejectCache
) -> tuple[LimitStatus, ...]:
    """Concurrency limits as last seen (free slots then, -1 when never seen)."""
    statuses = []
    for slot, key in zip(prepared.plan.slots, prepared.slots, strict=True):
        most, count = slot.limit.max_inflight, rejections.inflight.get(key)
        free = -1 if count is None else max(0, most - count)
        statuses.append(
            LimitStatus(slot.limit, slot.name, key, most, 0, True, free, 0.0, 0.0)
        )
    return tuple(statuses)
