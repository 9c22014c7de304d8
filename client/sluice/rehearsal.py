"""Rehearsal: the next scheduled version evaluated in shadow beside the one in force.

While a version is scheduled (a lowering waiting out its notice period), every
request whose policy it would change is also decided by that version's policy,
in the same EVALSHA as the real decision: its limits are sent after the
enforced ones with the script's rehearsal flag (``"2"``, see
``lua/token_bucket.lua``), on keys of their own, so still one round trip.
A rehearsed limit never changes the answer or its headers; whether the
scheduled version would have rejected the request goes into the decision
events, tagged with its version (:mod:`.metrics`), which the control plane
rolls up into its version page (``docs/rehearsal.md``).

Keys: a limit the scheduled policy shares with the one in force (same bucket,
same numbers) is read from the real bucket: the script counts it in both
decisions (flag ``"3"``). Every other limit of the scheduled policy gets a key
of its own: the key that version would use, with the request's hash tag (so one
slot, even on a Redis Cluster) and ``:r<version>`` appended::

    rl:{tenant:acme}:route:search:tenant:acme:1s:r7
    rl:{tenant:acme}:route:search:tenant:acme:1s:r7:s3    (shard 3 of a sharded one)

so a request adds at most one key per limit the schedule changes, each expiring
like any bucket once it would be full again. A shared bucket holds what the
version in force charged it, including requests the scheduled version would
have rejected: when such a shared limit binds too, the rehearsal errs towards
more rejections, never fewer. Policies with concurrency caps are rehearsed the same way in ``hot.lua``'s one
call (:mod:`.hot`). Not rehearsed: requests whose policy is the same in both
versions; policies with leases in the version in force (most of their requests
are decided in process); the rehearsed version's shadow limits and concurrency
caps; requests decided without Redis (the reject cache, a failure mode).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .plans import LimitPlan, PolicyPlan

__all__ = [
    "REHEARSED",
    "SHARED",
    "Rehearsal",
    "RehearsalPlan",
    "Rehearsed",
    "rehearsal_plan",
    "rehearsed",
]

REHEARSED = b"2"  #: the token-bucket script's flag of a rehearsed limit
SHARED = b"3"  #: its flag of an enforced limit the rehearsed version shares


@dataclass(frozen=True, slots=True)
class RehearsalPlan:
    """A scheduled version's policy for requests of one active plan: what to send."""

    version: int  #: the rehearsed snapshot's version
    active: PolicyPlan  #: the plan the request is enforced by
    limits: tuple[LimitPlan, ...]  #: the limits the schedule changes: keys of their own
    shared: tuple[int, ...]  #: indexes of the active limits the rehearsal counts too
    args: tuple[bytes, ...]  #: the script's ARGV: the active plan's, then ``limits``'
    #: key templates of ``limits``, ``:r<version>`` appended (a shard's ``:s<i>`` after it)
    templates: tuple[str, ...]
    sharded: tuple[tuple[int, int], ...] = ()  #: (index in ``limits``, shards)
    #: the limits whose fit the reply tells the rehearsal: their index among the
    #: script's buckets (own ones after the active plan's, then the shared ones)
    reads: tuple[int, ...] = ()


class Rehearsal(NamedTuple):
    """One request's rehearsal: its plan and the keys of its rehearsed buckets."""

    plan: RehearsalPlan
    keys: list[str]


class Rehearsed(NamedTuple):
    """What the rehearsed version would have answered: in a decision, never in its headers."""

    version: int  #: the rehearsed (scheduled) version
    rejected: bool  #: that version's limits would have rejected the request


def rehearsal_plan(
    active: PolicyPlan, scheduled: PolicyPlan, *, version: int
) -> RehearsalPlan | None:
    """The rehearsal of ``scheduled`` beside ``active``, or None when there is nothing
    to rehearse: the same buckets with the same numbers, an active policy with
    leases (its requests are mostly decided in process), or no enforced bucket
    limit in ``scheduled``."""
    leased = any(p.lease for p in active.limits)
    if leased or _same_buckets(active, scheduled):
        return None
    wanted = [p for p in scheduled.limits if not p.limit.shadow]
    if not wanted:
        return None
    enforced = {
        _bucket(p): index for index, p in enumerate(active.limits) if not p.limit.shadow
    }
    shared = tuple(enforced[_bucket(p)] for p in wanted if _bucket(p) in enforced)
    limits = tuple(p for p in wanted if _bucket(p) not in enforced)
    args = list(active.args)
    for index in shared:
        args[3 * index + 2] = (
            SHARED + args[3 * index + 2][1:]
        )  # the role; the rest stays
    for plan in limits:
        args += plan.kind.arguments(plan.shape, flag=REHEARSED)
    return RehearsalPlan(
        version,
        active,
        limits,
        shared,
        tuple(args),
        tuple(f"{p.template}:r{version}" for p in limits),
        tuple((i, p.limit.shards) for i, p in enumerate(limits) if p.limit.shards > 1),
        tuple(range(len(active.limits), len(active.limits) + len(limits))) + shared,
    )


def rehearsed(plan: RehearsalPlan, reply: list[int], step: int = 2) -> Rehearsed:
    """Read what the rehearsed version said from a script's ``reply`` (``step``
    values per bucket: 2 for ``token_bucket.lua``, 3 for ``hot.lua``)."""
    for index in plan.reads:  # a loop, not any(): this runs per rehearsed request
        if reply[1 + step * index] != 1:
            return Rehearsed(plan.version, True)
    return Rehearsed(plan.version, False)


def _bucket(plan: LimitPlan) -> tuple[str, tuple[bytes, ...]]:
    """What makes two limits one bucket with the same numbers: its key and its
    kind's script arguments (but the role flag)."""
    return (plan.template, plan.kind.arguments(plan.shape, flag=b"")[:-1])


def _same_buckets(active: PolicyPlan, scheduled: PolicyPlan) -> bool:
    return active.args == scheduled.args and [p.template for p in active.limits] == [
        p.template for p in scheduled.limits
    ]
