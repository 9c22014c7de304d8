"""Who a rule change reaches, and in which direction it moves their limits.

``limits.diff.diffing`` asks two questions of every change and answers them here:

* **Direction** (:func:`compare_limits`, :class:`Probe`): does a client get
  more or less? Limits for the same dimension and period are compared by their
  kind (``sluice.kinds``, ``LimitKind.direction``: GCRA member by member); a
  change that hurts any client counts as lowered.
* **Reach** (:class:`Reach`): which tiers and tenants may see their effective
  limits change. It is computed from the changed policy's scope, never by
  resolving every tenant on every route, so it stays cheap with 100,000 tenants.

Both go through the one resolver (``sluice.resolver``) where a
question of precedence arises; the only shortcut is the one precedence implies:
a tenant with its own permanent policy on a route, or on all routes, is not
reached by a tier or default change on that route.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from limits.diff.kinds import ChangeKind
from sluice.model import (
    ALL_ROUTES,
    DEFAULT_SCOPE,
    ConcurrencyLimit,
    Direction,
    Level,
    Policy,
    RateLimit,
    Resolution,
    Resolver,
    Rules,
    ScopeKind,
    kind_of,
)

__all__ = [
    "FAR_FUTURE",
    "Affected",
    "Probe",
    "Reach",
    "bucket_kind",
    "compare_caps",
    "compare_limit",
    "compare_limits",
    "compare_policies",
    "worst",
]

#: A moment after every override has expired: resolutions then show the
#: permanent rules, which is what a change of the rules is judged on.
FAR_FUTURE = float(2**62)
_DEFAULT_LEVELS = {Level.DEFAULT_ROUTE, Level.DEFAULT_ALL}
_CHANGE_KINDS = {
    Direction.LOWERED: ChangeKind.LOWERED,
    Direction.RAISED: ChangeKind.RAISED,
    Direction.UNCHANGED: ChangeKind.CHANGED,
}


@dataclass(frozen=True)
class Affected:
    """Whose effective limits a change can alter.

    Every tenant of ``tiers`` is reached except those in ``except_tenants``
    (their own permanent policy shadows the change); ``tenants`` are reached one
    by one; ``anonymous`` covers requests without a known tenant.
    """

    tiers: tuple[str, ...] = ()
    tenants: tuple[str, ...] = ()
    except_tenants: tuple[str, ...] = ()
    anonymous: bool = False

    def to_json(self) -> dict:
        return {
            "tiers": list(self.tiers),
            "tenants": list(self.tenants),
            "except_tenants": list(self.except_tenants),
            "anonymous": self.anonymous,
        }

    @classmethod
    def from_json(cls, data: dict) -> Affected:
        return cls(
            tiers=tuple(data["tiers"]),
            tenants=tuple(data["tenants"]),
            except_tenants=tuple(data["except_tenants"]),
            anonymous=data["anonymous"],
        )

    def reaches(self, tenant: str, tiers: Iterable[str]) -> bool:
        """Whether ``tenant``, on ``tiers`` (before or after the change), is reached."""
        if tenant in self.tenants:
            return True
        return bool(set(tiers) & set(self.tiers)) and tenant not in self.except_tenants


def worst(kinds: Iterable[ChangeKind]) -> ChangeKind:
    """Lowered if any is lowered, else raised if any is raised, else changed."""
    kinds = set(kinds)
    for kind in (ChangeKind.LOWERED, ChangeKind.RAISED):
        if kind in kinds:
            return kind
    return ChangeKind.CHANGED


def compare_limit(before: RateLimit, after: RateLimit, route_cost: int) -> ChangeKind:
    """Direction of one enforced limit (same dimension and period) for a client,
    as its kind says (:meth:`sluice.kinds.LimitKind.direction`): any move against
    the client makes it lowered, even if another member rose. A limit whose kind
    changes (a bucket becoming a sliding window) counts as lowered: the two kinds'
    numbers do not compare, so the change gets the notice and approval of one."""
    kind = kind_of(before)
    if kind is not kind_of(after):
        return ChangeKind.LOWERED
    return _CHANGE_KINDS[kind.direction(before, after, route_cost=route_cost)]


def bucket_kind(before: RateLimit, after: RateLimit, cost: int) -> ChangeKind:
    """Direction of one bucket kept across a change; shadow limits never reject,
    so turning one on raises and turning one off lowers."""
    if before.shadow and after.shadow:
        return ChangeKind.CHANGED
    if before.shadow != after.shadow:
        return ChangeKind.RAISED if after.shadow else ChangeKind.LOWERED
    return worst([compare_limit(before, after, cost)])


def compare_limits(
    before: Iterable[RateLimit], after: Iterable[RateLimit], *, route_cost: int = 1
) -> ChangeKind:
    """Direction from one set of limits to another; shadow limits never reject, so
    they count as absent. An enforced bucket that appears is lowered, one that goes is raised."""
    old = {(lim.dimension, lim.period): lim for lim in before if not lim.shadow}
    new = {(lim.dimension, lim.period): lim for lim in after if not lim.shadow}
    kinds = [ChangeKind.LOWERED for key in new.keys() - old.keys()]
    kinds += [ChangeKind.RAISED for key in old.keys() - new.keys()]
    kinds += [
        compare_limit(old[key], new[key], route_cost) for key in old.keys() & new.keys()
    ]
    return worst(kinds)


def compare_caps(
    before: Iterable[ConcurrencyLimit], after: Iterable[ConcurrencyLimit]
) -> ChangeKind:
    """Direction of concurrency caps, keyed by dimension (shadow ones count as absent):
    a new or smaller cap is lowered, a removed or larger one raised."""
    old = {cap.dimension: cap for cap in before if not cap.shadow}
    new = {cap.dimension: cap for cap in after if not cap.shadow}
    kinds = [ChangeKind.LOWERED for key in new.keys() - old.keys()]
    kinds += [ChangeKind.RAISED for key in old.keys() - new.keys()]
    for key in old.keys() & new.keys():
        was, now = old[key].max_inflight, new[key].max_inflight
        if was != now:
            kinds.append(ChangeKind.LOWERED if now < was else ChangeKind.RAISED)
    return worst(kinds)


def compare_policies(
    before: Policy | None, after: Policy | None, *, route_cost: int = 1
) -> ChangeKind:
    """Direction from one policy to another: its buckets and its concurrency caps.

    Hot-key options (shards, leases) move no limit either way: changing them alone
    is "changed".
    """
    return worst(
        [
            compare_limits(_limits(before), _limits(after), route_cost=route_cost),
            compare_caps(_caps(before), _caps(after)),
        ]
    )


class Probe:
    """Resolve for a tier as a whole: the resolver, with a stand-in tenant per tier."""

    def __init__(self, rules: Rules) -> None:
        self.rules = rules
        stand_ins = {_stand_in(tier): tier for tier in rules.tiers}
        self._resolver = Resolver(
            Rules(
                tiers=rules.tiers,
                tenants={**rules.tenants, **stand_ins},
                routes=rules.routes,
                policies=rules.policies,
            )
        )

    def policy_for(self, scope: str, route: str) -> Policy | None:
        """The permanent policy that applies at ``scope`` on ``route`` (``*``: unmatched);
        None for empty rules (before the first version)."""
        resolution = self._resolve(scope, route)
        return resolution.policy if resolution else None

    def level_for(self, scope: str, route: str) -> Level | None:
        resolution = self._resolve(scope, route)
        return resolution.level if resolution else None

    def _resolve(self, scope: str, route: str) -> Resolution | None:
        if not self.rules.policies:
            return None
        kind, _, subject = scope.partition(":")
        tenant = None
        if kind == ScopeKind.TIER and subject in self.rules.tiers:
            tenant = _stand_in(subject)
        elif kind == ScopeKind.TENANT and subject in self.rules.tenants:
            tenant = subject
        route_slug = route if route in self.rules.routes else None
        return self._resolver.resolve(tenant=tenant, route=route_slug, now=FAR_FUTURE)


def _limits(policy: Policy | None) -> tuple[RateLimit, ...]:
    return policy.limits if policy else ()


def _caps(policy: Policy | None) -> tuple[ConcurrencyLimit, ...]:
    return policy.concurrency if policy else ()


def _stand_in(tier: str) -> str:
    return f"\x00tier:{tier}"  # not a valid slug: never collides with a tenant


@dataclass
class _Side:
    """One rule set, indexed for reach questions."""

    probe: Probe
    by_tier: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))
    #: route (or ``*``) -> tenants with their own permanent policy on it
    own: dict[str, set[str]] = field(default_factory=lambda: defaultdict(set))

    @classmethod
    def of(cls, rules: Rules) -> _Side:
        side = cls(Probe(rules))
        for tenant, tier in rules.tenants.items():
            side.by_tier[tier].add(tenant)
        for policy in rules.policies:
            if policy.scope_kind == ScopeKind.TENANT and not policy.is_override:
                side.own[policy.route].add(policy.subject or "")
        return side

    def shadowed(self, route: str) -> set[str]:
        """Tenants whose own permanent policy beats any tier or default policy on ``route``."""
        if route == ALL_ROUTES:
            return set(self.own[ALL_ROUTES])
        return self.own[route] | self.own[ALL_ROUTES]


class Reach:
    """Answers "whose effective limits can this change alter?" for one pair of rule sets."""

    def __init__(self, old: Rules, new: Rules) -> None:
        self.old, self.new = _Side.of(old), _Side.of(new)
        self.all_tiers = tuple(sorted(old.tiers.keys() | new.tiers.keys()))
        self._moves: dict[tuple[str, str], ChangeKind] = {}
        self._members: dict[str, set[str]] = {}

    def everyone(self) -> Affected:
        return Affected(tiers=self.all_tiers, anonymous=True)

    def tenant(self, slug: str) -> Affected:
        return Affected(tenants=(slug,))

    def tier_move(self, was: str, now: str) -> ChangeKind:
        """Direction for a tenant moved from tier ``was`` to ``now``, on every route.

        Judged tier against tier (a tenant's own policies are their own changes),
        once per pair of tiers however many tenants move.
        """
        if (was, now) not in self._moves:
            rules = self.new.probe.rules
            kinds = [
                compare_policies(
                    self.old.probe.policy_for(f"{ScopeKind.TIER}:{was}", route),
                    self.new.probe.policy_for(f"{ScopeKind.TIER}:{now}", route),
                    route_cost=rules.routes[route].cost if route in rules.routes else 1,
                )
                for route in [*sorted(rules.routes), ALL_ROUTES]
            ]
            self._moves[(was, now)] = worst(kinds)
        return self._moves[(was, now)]

    def policy(self, policy: Policy) -> Affected:
        """Reach of a policy that was added, removed or changed."""
        if policy.scope_kind == ScopeKind.TENANT:
            return self.tenant(policy.subject or "")
        if policy.scope_kind == ScopeKind.TIER:
            tiers = (policy.subject or "",)
        else:
            tiers = tuple(t for t in self.all_tiers if self._falls_through(t, policy))
        return Affected(
            tiers=tiers,
            except_tenants=self._shadowed(tiers, policy.route),
            anonymous=policy.scope == DEFAULT_SCOPE,
        )

    def _falls_through(self, tier: str, policy: Policy) -> bool:
        """Whether ``tier`` reaches the default level on the policy's route, before or after."""
        scope = f"{ScopeKind.TIER}:{tier}"
        return any(
            side.probe.level_for(scope, policy.route) in _DEFAULT_LEVELS
            for side in (self.old, self.new)
        )

    def _shadowed(self, tiers: tuple[str, ...], route: str) -> tuple[str, ...]:
        members = self.tenants_of(tiers)
        kept = self.old.shadowed(route) & self.new.shadowed(route) & members
        return tuple(sorted(kept))

    def tenants_of(self, tiers: Iterable[str]) -> set[str]:
        """Every tenant on ``tiers`` before or after (a new set; each tier's members
        are computed once per diff)."""
        members = set()
        for tier in tiers:
            if tier not in self._members:
                self._members[tier] = self.old.by_tier[tier] | self.new.by_tier[tier]
            members |= self._members[tier]
        return members
