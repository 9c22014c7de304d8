"""From a request to bucket keys and script arguments, and from a script reply to a Decision.

The sync :class:`~.limiter.Limiter` and the asyncio one share this module; only
the Redis call differs between them. An :class:`Engine` is built once per
snapshot: it holds the shared :class:`~.resolver.Resolver` and, per policy and
request cost, a :class:`PolicyPlan` with the key templates and the encoded
script arguments, so a request pays for look-ups and string formatting only.
"""

from __future__ import annotations

import logging
import random
import time
from typing import NamedTuple

from .calendar import UTC_RULE, Calendar
from .decision import Decision, LimitStatus, Outcome
from .keys import owner_tag, subject_value
from .plans import LimitPlan, PolicyPlan, SlotPlan, calendared, compile_policy
from .rehearsal import Rehearsal, RehearsalPlan, Rehearsed, rehearsal_plan
from .resolver import Resolver
from .rules import CostRefusal, FailureMode, Policy, Route, request_cost
from .snapshot import Snapshot

__all__ = [
    "Engine",
    "LimitPlan",
    "PolicyPlan",
    "Prepared",
    "SlotPlan",
    "bucket_statuses",
    "compile_policy",
]

_MICROS = 1_000_000
_random = random.random
_CACHE_SIZE = 100_000  #: (tenant, route) resolutions kept per snapshot
_ROUTES_SIZE = 10_000  #: (method, path) route matches kept per snapshot
_PREPARED_SIZE = 10_000  #: requests kept prepared per snapshot
_PLANS_SIZE = 10_000  #: compiled (policy, cost, share) kept per snapshot

logger = logging.getLogger("sluice.limiter")
_refused: set[CostRefusal] = set()  #: refusals already logged at WARNING


class Prepared(NamedTuple):
    """A request resolved and keyed: what the store is asked, and what to do if it fails.

    A tuple rather than a frozen dataclass: one is built per request (see :mod:`.decision`).
    """

    plan: PolicyPlan
    keys: list[str]
    route: str | None
    failure_mode: FailureMode
    cost: int  #: the route's cost (a limit may override it)
    slots: tuple[str, ...] = ()  #: keys of the policy's concurrency limits
    #: the scheduled version's buckets to run beside (:mod:`.rehearsal`), if any
    rehearsal: Rehearsal | None = None
    unknown_tenant: bool = False  #: a tenant was named that the snapshot lacks
    #: the cost the request declared, when the route's rules did not take it as is
    #: (:func:`.rules.request_cost`); None when taken or none was declared
    declared_cost: int | None = None


# plan, route slug, mode, cost, the rehearsal (at the scheduled route cost), the
# rehearsed policy, the route (what bounds a declared cost)
_Entry = tuple[
    PolicyPlan,
    str | None,
    FailureMode,
    int,
    RehearsalPlan | None,
    Policy | None,
    Route | None,
]


class Engine:
    """Everything a limiter needs from one snapshot, built once when the snapshot loads."""

    def __init__(
        self,
        snapshot: Snapshot,
        *,
        unmatched: FailureMode = FailureMode.LOCAL,
        resolver: Resolver | None = None,
        rehearse: Snapshot | None = None,
    ) -> None:
        """``resolver``: one already built for ``snapshot.rules``, to share its index;
        ``rehearse``: the scheduled snapshot to rehearse beside it (:mod:`.rehearsal`)."""
        self.snapshot = snapshot
        self.version = snapshot.version
        self.resolver = resolver or Resolver(snapshot.rules)
        self.unmatched = unmatched  #: failure mode of requests that match no route
        self._plans: dict[tuple[int, int, int, Calendar | None], PolicyPlan] = {}
        self._cache: dict[tuple[str | None, str | None], _Entry] = {}
        #: (method, path) -> the slug of its route, None for no route
        self._routes: dict[tuple[str | None, str], str | None] = {}
        #: the arguments of :meth:`prepare` (but ``now``) -> what it returned
        self._prepared: dict[tuple[str | int | None, ...], Prepared] = {}
        self._valid_until = float("-inf")
        #: the engine of the rehearsed snapshot, if any
        self.rehearsed = (
            Engine(rehearse, unmatched=unmatched) if rehearse is not None else None
        )
        #: (id(plan), id(rehearsed plan)) -> both plans and their rehearsal
        self._rehearsals: dict[
            tuple[int, int], tuple[PolicyPlan, PolicyPlan, RehearsalPlan | None]
        ] = {}

    def plan(
        self,
        policy: Policy,
        cost: int,
        share: int = 1,
        *,
        calendar: Calendar | None = None,
        now: float | None = None,
    ) -> PolicyPlan:
        """Return the compiled ``policy`` for ``cost`` (cached for the snapshot's life,
        or, when it holds calendar quotas, per ``calendar`` until the period it was
        compiled in ends; ``now``: epoch seconds, the caller's clock). The cache
        holds up to :data:`_PLANS_SIZE` plans: declared costs and calendars must
        not grow it forever."""
        # the calendar matters to policies with quotas only: one plan for the others
        calendar = (calendar or Calendar()) if calendared(policy) else None
        cache_key = (id(policy), cost, share, calendar)
        plan = self._plans.get(cache_key)
        if now is None:
            now = time.time()
        if plan is None or plan.valid_until <= now:
            if len(self._plans) >= _PLANS_SIZE:
                self._plans.clear()
                self._rehearsals.clear()
            zone_rule = UTC_RULE
            if calendar is not None:
                zone_rule = self.snapshot.rules.zones.get(calendar.zone, UTC_RULE)
            plan = self._plans[cache_key] = compile_policy(
                policy,
                cost=cost,
                share=share,
                calendar=calendar,
                zone_rule=zone_rule,
                now=now,
            )
            # resolutions and prepared requests hold plans: forget them at its end
            self._valid_until = min(self._valid_until, plan.valid_until)
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
        cost: int | None = None,
    ) -> Prepared:
        """Resolve the request's policy at ``now`` (epoch seconds) and build its keys.

        ``cost`` replaces the route's cost when given (a limit's own cost still wins).
        Without ``route``, the route is matched by ``method`` and ``path``, or by
        ``path`` alone when ``method`` is None (:meth:`.RouteTable.match`).
        A repeat request gets the same answer without resolving or keying it
        again, unless its keys are random (sharded limits).
        """
        if now >= self._valid_until:
            self._expire(now)
        request = (route, method, path, tenant, user, api_key, ip, cost)
        prepared = self._prepared.get(request)
        if prepared is None:
            prepared = self._prepare(
                route, method, path, tenant, user, api_key, ip, now, cost
            )
            if not _randomized(prepared):
                if len(self._prepared) >= _PREPARED_SIZE:
                    self._prepared.clear()
                self._prepared[request] = prepared
        return prepared

    def _prepare(
        self,
        route: str | None,
        method: str | None,
        path: str | None,
        tenant: str | None,
        user: str | None,
        api_key: str | None,
        ip: str | None,
        now: float,
        cost: int | None,
    ) -> Prepared:
        if route is None and path is not None:
            route = self._route_of(method, path)
        plan, slug, mode, route_cost, rehearsal, scheduled, found = self._resolved(
            tenant, route, now
        )
        declared, (cost, refusal) = cost, request_cost(found, cost)
        if refusal is not None:
            _log_refusal(refusal, slug, declared)
        else:
            declared = None
        if cost != route_cost:
            plan = self.plan(plan.policy, cost, calendar=plan.calendar, now=now)
            rehearsal = self._rehearsal_of(plan, scheduled, cost, tenant, now)
        owner = owner_tag(tenant, ip, plan.counts_tenant)
        keys = [
            p.template % (owner, subject_value(p.dimension, tenant, user, api_key, ip))
            for p in plan.limits
        ]
        if plan.sharded:
            _shard(keys, plan.sharded)
        rehearsing = None
        if rehearsal is not None:  # the request's hash tag: the same slot
            rehearsing = Rehearsal(
                rehearsal, _rehearsal_keys(rehearsal, owner, tenant, user, api_key, ip)
            )
        unknown = bool(tenant) and tenant not in self.snapshot.rules.tenants
        if not plan.slots:
            return Prepared(
                plan, keys, slug, mode, cost, (), rehearsing, unknown, declared
            )
        slots = tuple(
            s.template % (owner, subject_value(s.dimension, tenant, user, api_key, ip))
            for s in plan.slots
        )
        return Prepared(
            plan, keys, slug, mode, cost, slots, rehearsing, unknown, declared
        )

    def _route_of(self, method: str | None, path: str) -> str | None:
        """The slug of the route of ``method`` and ``path``, matched once per snapshot."""
        key = (method, path)
        try:
            return self._routes[key]
        except KeyError:
            pass
        matched = self.resolver.match_route(method, path)
        if len(self._routes) >= _ROUTES_SIZE:  # paths with ids must not grow it forever
            self._routes.clear()
        slug = self._routes[key] = matched.slug if matched else None
        return slug

    def _rehearsal_of(
        self,
        plan: PolicyPlan,
        scheduled: Policy | None,
        cost: int,
        tenant: str | None,
        now: float,
    ) -> RehearsalPlan | None:
        """The rehearsal of ``scheduled`` at ``cost`` beside ``plan`` (cached per pair)."""
        if scheduled is None or self.rehearsed is None:
            return None
        calendar = self.rehearsed.snapshot.rules.calendar(tenant)
        other = self.rehearsed.plan(scheduled, cost, calendar=calendar, now=now)
        self._valid_until = min(self._valid_until, other.valid_until)
        # the entry holds both plans, so their ids name them while it lives (plans
        # may be dropped from the caches, see plan())
        pair = (id(plan), id(other))
        entry = self._rehearsals.get(pair)
        if entry is None:
            entry = self._rehearsals[pair] = (
                plan,
                other,
                rehearsal_plan(plan, other, version=self.rehearsed.version),
            )
        return entry[2]

    def _resolved(self, tenant: str | None, route: str | None, now: float) -> _Entry:
        """The shared resolver's answer for (tenant, route), cached until an override expires.

        Only the expiry of an override changes what the resolver says for the
        same snapshot, so entries are dropped when the next expiry passes.
        """
        if now >= self._valid_until:
            self._expire(now)
        entry = self._cache.get((tenant, route))
        if entry is None:
            resolution = self.resolver.resolve(tenant=tenant, route=route, now=now)
            found = resolution.route
            calendar = self.snapshot.rules.calendar(tenant)
            plan = self.plan(
                resolution.policy, resolution.cost, calendar=calendar, now=now
            )
            scheduled, rehearsal = None, None
            if self.rehearsed is not None:  # at its own route cost, which may differ
                later = self.rehearsed.resolver.resolve(
                    tenant=tenant, route=route, now=now
                )
                scheduled = later.policy
                rehearsal = self._rehearsal_of(plan, scheduled, later.cost, tenant, now)
            entry = (
                plan,
                found.slug if found else None,
                found.failure_mode if found else self.unmatched,
                resolution.cost,
                rehearsal,
                scheduled,
                found,
            )
            if (
                len(self._cache) >= _CACHE_SIZE
            ):  # unknown tenants must not grow it forever
                self._cache.clear()
            self._cache[(tenant, route)] = entry
        return entry

    def _expire(self, now: float) -> None:
        """Forget resolutions and prepared requests: an override expired, or a quota's
        period ended (or none was looked at yet)."""
        self._cache.clear()
        self._prepared.clear()
        self._rehearsals.clear()
        stale = [key for key, plan in self._plans.items() if plan.valid_until <= now]
        for key in stale:
            del self._plans[key]
        self._valid_until = self._next_expiry(now)

    def _next_expiry(self, now: float) -> float:
        moments = [
            policy.expires_at.timestamp()
            for policy in self.snapshot.rules.policies
            if policy.expires_at is not None and policy.expires_at.timestamp() > now
        ]
        if self.rehearsed is not None:  # its overrides expire too
            moments.append(self.rehearsed._next_expiry(now))
        moments += [p.valid_until for p in self._plans.values() if p.valid_until > now]
        return min(moments, default=float("inf"))

    def decision(
        self,
        prepared: Prepared,
        reply: list[int],
        *,
        plan: PolicyPlan | None = None,
        at: float = 0.0,
        rehearsed: Rehearsed | None = None,
    ) -> Decision:
        """Turn the script's reply (or a local bucket's, with its ``plan``) into a
        Decision made at ``at`` (epoch seconds, store clock); ``rehearsed``: what
        the rehearsal said (:func:`.rehearsal.rehearsed`), kept in the decision."""
        plan = plan or prepared.plan
        # a quota resets at a moment: the store's time, else (no reply seen yet) ours
        now = round((at or time.time()) * _MICROS)
        statuses = bucket_statuses(plan, prepared.keys, reply, now=now)
        return self.conclude(
            prepared, plan, statuses, reply[0] == 1, at=at, rehearsed=rehearsed
        )

    def conclude(
        self,
        prepared: Prepared,
        plan: PolicyPlan,
        statuses: tuple[LimitStatus, ...],
        admitted: bool,
        *,
        at: float = 0.0,
        rehearsed: Rehearsed | None = None,
    ) -> Decision:
        """The Decision for ``statuses`` (buckets, then concurrency slots if any)."""
        deciding = _deciding(statuses, admitted)
        shadow = any(not s.fits for s in statuses if s.limit.shadow)
        if deciding is None:  # validation forbids a policy of shadow limits only
            return _undecided(
                self, prepared, plan, statuses, admitted, shadow
            )._replace(
                at=at,
                rehearsed=rehearsed,
                unknown_tenant=prepared.unknown_tenant,
                documentation=self.snapshot.rules.documentation,
                declared_cost=prepared.declared_cost,
            )
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
            at=at,
            rehearsed=rehearsed,
            unknown_tenant=prepared.unknown_tenant,
            documentation=self.snapshot.rules.documentation,
            declared_cost=prepared.declared_cost,
        )


def _log_refusal(refusal: CostRefusal, route: str | None, declared: int | None) -> None:
    """Log a declared cost the rules did not take: WARNING the first time per reason,
    then DEBUG, so a misconfigured gateway cannot flood the log."""
    level = logging.DEBUG if refusal in _refused else logging.WARNING
    _refused.add(refusal)
    logger.log(level, "limiter.bad_input: %s: %s on route %s", refusal, declared, route)


def _randomized(prepared: Prepared) -> bool:
    """Whether ``prepared`` has a randomly sharded key (another request may get another)."""
    rehearsal = prepared.rehearsal
    return bool(
        prepared.plan.sharded or (rehearsal is not None and rehearsal.plan.sharded)
    )


def _shard(keys: list[str], sharded: tuple[tuple[int, int], ...]) -> None:
    """Suffix a random shard to each sharded key: no pattern of requests maps to one."""
    for index, shards in sharded:
        keys[index] += f":s{int(_random() * shards)}"


def _rehearsal_keys(
    plan: RehearsalPlan,
    owner: str,
    tenant: str | None,
    user: str | None,
    api_key: str | None,
    ip: str | None,
) -> list[str]:
    keys = [
        template % (owner, subject_value(p.dimension, tenant, user, api_key, ip))
        for template, p in zip(plan.templates, plan.limits, strict=True)
    ]
    if plan.sharded:
        _shard(keys, plan.sharded)
    return keys


def bucket_statuses(
    plan: PolicyPlan, keys: list[str], reply: list[int], step: int = 2, now: int = 0
) -> tuple[LimitStatus, ...]:
    """Statuses of the limits from a reply with ``step`` values per limit (fits, the
    key's state, ...); each limit's shape reads its state (:class:`.kinds.Shape`),
    ``now`` being the decision's store time, µs (a quota resets at a moment)."""
    statuses = []
    for index, limit_plan in enumerate(plan.limits):
        at = step * index + 1
        fits, state = reply[at] == 1, reply[at + 1]
        shape = limit_plan.shape
        remaining = shape.remaining(state)
        if plan.sharded:  # what one shard holds, as an estimate of the whole bucket
            remaining *= limit_plan.limit.shards
        statuses.append(
            LimitStatus(
                limit_plan.limit,
                limit_plan.name,
                keys[index],
                limit_plan.quota,
                limit_plan.window,
                fits,
                remaining,
                shape.reset(state, now) / _MICROS,
                0.0 if fits else shape.wait(state) / _MICROS,
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
