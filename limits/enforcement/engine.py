"""From a request to bucket keys and script arguments, and from a script reply to a Decision.

The sync :class:`~.limiter.Limiter` and the asyncio one share this module; only
the Redis call differs between them. An :class:`Engine` is built once per
snapshot: it holds the shared :class:`~.resolver.Resolver` and, per policy and
request cost, a :class:`PolicyPlan` with the key templates and the encoded
script arguments, so a request pays for look-ups and string formatting only.
"""

from __future__ import annotations

from dataclasses import dataclass

from .bucket import Geometry, geometry
from .decision import Decision, LimitStatus, Outcome
from .keys import key_template, owner_tag, subject_value
from .resolver import Resolver
from .snapshot import PERIODS, Dimension, FailureMode, Limit, Policy, Snapshot

__all__ = ["Engine", "LimitPlan", "PolicyPlan", "Prepared", "compile_policy"]

_MICROS = 1_000_000


@dataclass(frozen=True, slots=True)
class LimitPlan:
    """One limit of a policy, ready to key and to run."""

    limit: Limit
    name: str  #: the policy name in RateLimit headers: ``<dimension>-<period unit>``
    template: str  #: the bucket key template, see :func:`.keys.key_template`
    geometry: Geometry
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
        plans.append(LimitPlan(limit, name, template, shape, window))
        args += [
            b"%d" % shape.increment,
            b"%d" % shape.capacity,
            b"1" if limit.shadow else b"0",
        ]
    counts_tenant = any(p.limit.dimension is Dimension.TENANT for p in plans)
    return PolicyPlan(policy, tuple(plans), tuple(args), counts_tenant)


@dataclass(frozen=True, slots=True)
class Prepared:
    """A request resolved and keyed: what the store is asked, and what to do if it fails."""

    plan: PolicyPlan
    keys: list[str]
    route: str | None
    failure_mode: FailureMode
    cost: int  #: the route's cost (a limit may override it)


class Engine:
    """Everything a limiter needs from one snapshot, built once when the snapshot loads."""

    def __init__(
        self, snapshot: Snapshot, *, unmatched: FailureMode = FailureMode.LOCAL
    ) -> None:
        self.snapshot = snapshot
        self.version = snapshot.version
        self.resolver = Resolver(snapshot.rules)
        self.unmatched = unmatched  #: failure mode of requests that match no route
        self._plans: dict[tuple[int, int, int], PolicyPlan] = {}

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
        resolution = self.resolver.resolve(tenant=tenant, route=route, now=now)
        cost = resolution.cost
        plan = self.plan(resolution.policy, cost)
        owner = owner_tag(tenant=tenant, ip=ip, counts_tenant=plan.counts_tenant)
        keys = [
            p.template
            % (
                owner,
                subject_value(
                    p.limit.dimension, tenant=tenant, user=user, api_key=api_key, ip=ip
                ),
            )
            for p in plan.limits
        ]
        found = resolution.route
        mode = found.failure_mode if found else self.unmatched
        return Prepared(plan, keys, found.slug if found else None, mode, cost)

    def decision(
        self, prepared: Prepared, reply: list[int], *, plan: PolicyPlan | None = None
    ) -> Decision:
        """Turn the script's reply (or a local bucket's, with its ``plan``) into a Decision."""
        plan = plan or prepared.plan
        statuses = tuple(
            _status(p, key, reply[2 * i + 1], reply[2 * i + 2])
            for i, (p, key) in enumerate(zip(plan.limits, prepared.keys, strict=True))
        )
        admitted = reply[0] == 1
        deciding = _deciding(statuses, admitted)
        shadow = any(not s.fits for s in statuses if s.limit.shadow)
        outcome = _outcome(admitted, shadow)
        return Decision(
            allowed=admitted,
            status=200 if admitted else 429,
            outcome=outcome,
            deciding=deciding,
            limit=deciding.quota if deciding else 0,
            remaining=deciding.remaining if deciding else 0,
            reset=deciding.reset if deciding else 0.0,
            retry_after=None
            if admitted
            else (deciding.retry_after if deciding else 1.0),
            policy=plan.policy,
            snapshot_version=self.version,
            route=prepared.route,
            statuses=statuses,
            shadow=shadow,
        )


def _status(plan: LimitPlan, key: str, fits: int, debt: int) -> LimitStatus:
    shape = plan.geometry
    return LimitStatus(
        limit=plan.limit,
        name=plan.name,
        key=key,
        quota=shape.capacity // shape.tick,
        window=plan.window,
        fits=fits == 1,
        remaining=shape.remaining(debt),
        reset=debt / _MICROS,
        retry_after=0.0 if fits == 1 else shape.wait(debt) / _MICROS,
    )


def _deciding(statuses: tuple[LimitStatus, ...], admitted: bool) -> LimitStatus | None:
    """The limit that rejected with the longest wait, or the one closest to rejecting."""
    enforcing = [s for s in statuses if not s.limit.shadow]
    if not enforcing:  # validation forbids it; report nothing rather than guess
        return None
    if admitted:
        return min(enforcing, key=lambda s: (s.remaining, -s.reset))
    return max((s for s in enforcing if not s.fits), key=lambda s: s.retry_after)


def _outcome(admitted: bool, shadow: bool) -> Outcome:
    if not admitted:
        return Outcome.LIMITED
    return Outcome.SHADOW_LIMITED if shadow else Outcome.ALLOWED
