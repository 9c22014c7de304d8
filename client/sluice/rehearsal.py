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

Keys: a rehearsed bucket's key is the key that version would use, with the
request's hash tag (so one slot, even on a Redis Cluster) and ``:r<version>``
appended::

    rl:{tenant:acme}:route:search:tenant:acme:1s:r7

so a request adds at most one key per limit of the rehearsed policy, each
expiring like any bucket once it would be full again. Not rehearsed: requests
whose policy is the same in both versions; policies decided by ``hot.lua``
(leases, concurrency caps) in the version in force; the rehearsed version's
shadow limits and concurrency caps; requests decided without Redis (the
reject cache, a failure mode).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .plans import LimitPlan, PolicyPlan

__all__ = ["REHEARSED", "Rehearsal", "RehearsalPlan", "Rehearsed", "rehearsal_plan"]

REHEARSED = b"2"  #: the token-bucket script's flag of a rehearsed limit


@dataclass(frozen=True, slots=True)
class RehearsalPlan:
    """A scheduled version's policy for requests of one active plan: what to send."""

    version: int  #: the rehearsed snapshot's version
    active: PolicyPlan  #: the plan the request is enforced by
    limits: tuple[LimitPlan, ...]  #: the rehearsed policy's enforced bucket limits
    args: tuple[bytes, ...]  #: the script's ARGV: the active plan's, then these limits'
    suffix: str  #: appended to each rehearsed key: ``:r<version>``
    sharded: tuple[tuple[int, int], ...] = ()  #: (index in ``limits``, shards)


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
    to rehearse: the same buckets with the same numbers, a policy the hot script
    decides, or no enforced bucket limit in ``scheduled``."""
    if active.hot or _same_buckets(active, scheduled):
        return None
    limits = tuple(p for p in scheduled.limits if not p.limit.shadow)
    if not limits:
        return None
    args = list(active.args)
    for plan in limits:
        args += [b"%d" % plan.geometry.increment, b"%d" % plan.geometry.capacity]
        args.append(REHEARSED)
    return RehearsalPlan(
        version,
        active,
        limits,
        tuple(args),
        f":r{version}",
        tuple((i, p.limit.shards) for i, p in enumerate(limits) if p.limit.shards > 1),
    )


def rehearsed(plan: RehearsalPlan, reply: list[int]) -> Rehearsed:
    """Read the rehearsed limits' part of a token-bucket ``reply``."""
    first = 1 + 2 * len(plan.active.limits)
    fits = reply[first : first + 2 * len(plan.limits) : 2]
    return Rehearsed(plan.version, not all(f == 1 for f in fits))


def _same_buckets(active: PolicyPlan, scheduled: PolicyPlan) -> bool:
    return active.args == scheduled.args and [p.template for p in active.limits] == [
        p.template for p in scheduled.limits
    ]
