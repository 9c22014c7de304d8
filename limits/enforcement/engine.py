"""From a request to bucket keys and script arguments, and from a script reply to a Decision.

The sync :class:`~.limiter.Limiter` and the asyncio one share this module; only
the Redis call differs between them. An :class:`Engine` is built once per
snapshot: it holds the shared :class:`~.resolver.Resolver` and, per policy and
request cost, a :class:`PolicyPlan` with the key templates and the encoded
script arguments, so a request pays for look-ups and string formatting only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from .bucket import Geometry, geometry
from .decision import Decision, LimitStatus, Outcome
from .keys import key_template, owner_tag, subject_value
from .resolver import Resolver
from .snapshot import PERIODS, Dimension, FailureMode, Limit, Policy, Snapshot

__all__ = ["Engine", "LimitPlan", "PolicyPlan", "Prepared", "compile_policy"]

_MICROS = 1_000_000
_CACHE_SIZE = 100_000  #: (tenant, route) resolutions kept per snapshot


@dataclass(frozen=True, slots=True)
class LimitPlan:
    """One limit of a policy, ready to key and to run."""

    limit: Limit
    dimension: Dimension  #: the limit's, kept at hand for the hot path
    name: str  #: the policy name in RateLimit headers: ``<dimension>-<period unit>``
    template: str  #: the bucket key template, see :func:`.keys.key_template`
    geometry: Geometry
    quota: int  #: the bucket's capacity in tokens: IETF ``q``
    window: int  #: whole seconds to refill the full bucket: IETF ``w``


@dataclass(frozen=True, slots=True)
class PolicyPlan:
    """A policy compiled for one request cost: key templates and script arguments."""

    policy: Policy
    limits: tuple[LimitPlan, ...]
    args: tuple[bytes, ...]  #: ARGV of the script, already encoded
    counts_tenant: bool  #: whether a limit counts per tenant (it picks the owner)


def compile_policy(policy: Policy, *, cost: int, share: int = 1) -> PolicyPlan:
    """Compile ``policy`` for requests of ``cost`` (``share``: see :func:`.bucket.geometry`)."""
    plans = []
    args: list[bytes] = []
    for limit in policy.limits:
        shape = geometry(limit, cost=limit.cost or cost, share=share)
        name = f"{limit.dimension.value}-{PERIODS[limit.period]}"
        template = key_template(policy.route, limit.dimension, limit.period)
        window = -(-shape.capacity // _MICROS)  # ceil: q / w never overstates the rate
        quota = shape.capacity // shape.tick
        plans.append(
            LimitPlan(limit, limit.dimension, name, template, shape, quota, window)
        )
        args += [
            b"%d" % shape.increment,
            b"%d" % shape.capacity,
            b"1" if limit.shadow else b"0",
        ]
    counts_tenant = any(p.limit.dimension is Dimension.TENANT for p in plans)
    return PolicyPlan(policy, tuple(plans), tuple(args), counts_tenant)


class Prepared(NamedTuple):
    """A request resolved and keyed: what the store is asked, and what to do if it fails.

    A tuple rather than a frozen dataclass: one is built per request (see :mod:`.decision`).
    """

    plan: PolicyPlan
    keys: list[str]
    route: str | None
    failure_mode: FailureMode
    cost: int  #: the route's cost (a limit may override it)


_Entry = tuple[PolicyPlan, str | None, FailureMode, int]  # plan, route slug, mode, cost


class Engine:
    """Everything a limiter needs from one snapshot, built once when the snapshot loads."""

    def __init__(
        self,
        snapshot: Snapshot,
        *,
        unmatched: FailureMode = FailureMode.LOCAL,
        resolver: Resolver | None = None,
    ) -> None:
        """``resolver``: one already built for ``snapshot.rules``, to share its index."""
        self.snapshot = snapshot
        self.version = snapshot.version
        self.resolver = resolver or Resolver(snapshot.rules)
        self.unmatched = unmatched  #: failure mode of requests that match no route
        self._plans: dict[tuple[int, int, int], PolicyPlan] = {}
        self._cache: dict[tuple[str | None, str | None], _Entry] = {}
        self._valid_until = float("-inf")

    def plan(self, policy: Policy, cost: int, share: int = 1) -> PolicyPlan:
        """Return the compiled ``policy`` for ``cost`` (cached for the snapshot's life)."""
        cache_key = (id(policy), cost, share)
        plan = self._plans.get(cache_key)
        if plan is None:
            plan = self._plans[cache_key] = compile_policy(
                policy, cost=cost, share=share
            )
        return plan

    def prepare(
        self,
        *,
        route: str | None,
        method: str | None,
        path: str | None,
        tenant: str | None,
        user: str | None,
        api_key: str | None,
        ip: str | None,
        now: float,
    ) -> Prepared:
        """Resolve the request's policy at ``now`` (epoch seconds) and build its keys."""
        if route is None and method is not None and path is not None:
            matched = self.resolver.match_route(method, path)
            route = matched.slug if matched else None
        plan, slug, mode, cost = self._resolved(tenant, route, now)
        owner = owner_tag(tenant, ip, plan.counts_tenant)
        keys = [
            p.template % (owner, subject_value(p.dimension, tenant, user, api_key, ip))
            for p in plan.limits
        ]
        return Prepared(plan, keys, slug, mode, cost)

    def _resolved(self, tenant: str | None, route: str | None, now: float) -> _Entry:
        """The shared resolver's answer for (tenant, route), cached until an override expires.

        Only the expiry of an override changes what the resolver says for the
        same snapshot, so entries are dropped when the next expiry passes.
        """
        if now >= self._valid_until:
            self._cache.clear()
            self._valid_until = self._next_expiry(now)
        entry = self._cache.get((tenant, route))
        if entry is None:
            resolution = self.resolver.resolve(tenant=tenant, route=route, now=now)
            found = resolution.route
            entry = (
                self.plan(resolution.policy, resolution.cost),
                found.slug if found else None,
                found.failure_mode if found else self.unmatched,
                resolution.cost,
            )
            if (
                len(self._cache) >= _CACHE_SIZE
            ):  # unknown tenants must not grow it forever
                self._cache.clear()
            self._cache[(tenant, route)] = entry
        return entry

    def _next_expiry(self, now: float) -> float:
        moments = [
            policy.expires_at.timestamp()
            for policy in self.snapshot.rules.policies
            if policy.expires_at is not None and policy.expires_at.timestamp() > now
        ]
        return min(moments, default=float("inf"))

    def decision(
        self, prepared: Prepared, reply: list[int], *, plan: PolicyPlan | None = None
    ) -> Decision:
        """Turn the script's reply (or a local bucket's, with its ``plan``) into a Decision."""
        plan = plan or prepared.plan
        statuses = _statuses(plan, prepared.keys, reply)
        admitted = reply[0] == 1
        deciding = _deciding(statuses, admitted)
        shadow = any(not s.fits for s in statuses if s.limit.shadow)
        if deciding is None:  # validation forbids a policy of shadow limits only
            return _undecided(self, prepared, plan, statuses, admitted, shadow)
        return Decision(
            admitted,
            200 if admitted else 429,
            _outcome(admitted, shadow),
            deciding,
            deciding.quota,
            deciding.remaining,
            deciding.reset,
            None if admitted else deciding.retry_after,
            plan.policy,
            self.version,
            prepared.route,
            statuses,
            shadow,
        )


def _statuses(
    plan: PolicyPlan, keys: list[str], reply: list[int]
) -> tuple[LimitStatus, ...]:
    statuses = []
    for index, limit_plan in enumerate(plan.limits):
        fits, debt = reply[2 * index + 1] == 1, reply[2 * index + 2]
        shape = limit_plan.geometry
        statuses.append(
            LimitStatus(
                limit_plan.limit,
                limit_plan.name,
                keys[index],
                limit_plan.quota,
                limit_plan.window,
                fits,
                max(0, (shape.capacity - debt) // shape.tick),
                debt / _MICROS,
                0.0 if fits else shape.wait(debt) / _MICROS,
            )
        )
    return tuple(statuses)


def _deciding(statuses: tuple[LimitStatus, ...], admitted: bool) -> LimitStatus | None:
    """The limit that rejected with the longest wait, or the one closest to rejecting."""
    best: LimitStatus | None = None
    for status in statuses:
        if status.limit.shadow:
            continue
        if admitted:
            if best is None or (status.remaining, -status.reset) < (
                best.remaining,
                -best.reset,
            ):
                best = status
        elif not status.fits and (
            best is None or status.retry_after > best.retry_after
        ):
            best = status
    return best


def _undecided(
    engine: Engine,
    prepared: Prepared,
    plan: PolicyPlan,
    statuses: tuple[LimitStatus, ...],
    admitted: bool,
    shadow: bool,
) -> Decision:
    return Decision(
        admitted,
        200 if admitted else 429,
        _outcome(admitted, shadow),
        None,
        0,
        0,
        0.0,
        None if admitted else 1.0,
        plan.policy,
        engine.version,
        prepared.route,
        statuses,
        shadow,
    )


def _outcome(admitted: bool, shadow: bool) -> Outcome:
    if not admitted:
        return Outcome.LIMITED
    return Outcome.SHADOW_LIMITED if shadow else Outcome.ALLOWED
