"""Whole-rule-set checks, shared by the control plane (before publishing) and gateways.

Field-level checks (a positive rate, a known period) happen where values are
read; this module checks what only the complete set can tell: references that
resolve, a default policy that exists, buckets deep enough for every request,
and no policy that would leave requests unlimited.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from .calendar import DEFAULT_ZONE
from .kinds import GCRA, kind_of
from .quota import MAX_TIMEOUT
from .routing import PatternError, RouteTable
from .rules import ALL_ROUTES, DEFAULT_SCOPE, Policy, Rules, ScopeKind

__all__ = ["Problem", "policy_problems", "policy_ref", "validate_rules"]


@dataclass(frozen=True, slots=True)
class Problem:
    """One reason a rule set cannot be published or enforced."""

    kind: str  #: "tier", "tenant", "route" or "policy"
    key: str  #: the object's slug, or a policy's ``scope/route`` (``~`` marks an override)
    field: str  #: the member at fault, e.g. ``limits[0].burst``
    message: str

    @property
    def path(self) -> str:
        return f"{self.kind}:{self.key}.{self.field}"

    def __str__(self) -> str:
        return f"{self.kind} {self.key}: {self.field}: {self.message}"


def policy_ref(policy: Policy) -> str:
    """The key a Problem uses for a policy: ``tier:pro/search`` (``~`` for an override)."""
    return f"{policy.scope}/{policy.route}{'~' if policy.is_override else ''}"


MAX_DOCUMENTATION = 500  #: characters of ``Rules.documentation``


def validate_rules(rules: Rules) -> list[Problem]:
    """Return every problem of ``rules`` (empty when it can be published and enforced)."""
    problems = [
        Problem("tenant", slug, "tier", f"unknown tier {tier!r}")
        for slug, tier in rules.tenants.items()
        if tier not in rules.tiers
    ]
    problems += _route_problems(rules)
    problems += _calendar_problems(rules)
    # a route's limits must hold the most a request of it may cost, declared or not
    max_cost = max((route.largest_cost for route in rules.routes.values()), default=1)
    for policy in rules.policies:
        problems += _policy_problems(rules, policy, max_cost)
    counts = Counter(policy.key for policy in rules.policies)
    problems += [
        Problem(
            "policy",
            policy_ref(p),
            "scope",
            "more than one policy for this scope and route",
        )
        for p in rules.policies
        if counts[p.key] > 1
    ]
    if (DEFAULT_SCOPE, ALL_ROUTES, False) not in counts:
        problems.append(
            Problem(
                "policy",
                f"{DEFAULT_SCOPE}/{ALL_ROUTES}",
                "scope",
                "the default policy for all routes is missing: requests would be unlimited",
            )
        )
    if rules.documentation and not _is_link(rules.documentation):
        problems.append(
            Problem(
                "rules",
                "documentation",
                "documentation",
                f"must be an http(s) URL of at most {MAX_DOCUMENTATION} characters",
            )
        )
    return problems


def _is_link(text: str) -> bool:
    return text.startswith(("https://", "http://")) and len(text) <= MAX_DOCUMENTATION


def _calendar_problems(rules: Rules) -> list[Problem]:
    """Calendars of known tenants, in zones whose rule the snapshot carries."""
    problems = []
    for slug, calendar in rules.calendars.items():
        if slug not in rules.tenants:
            problems.append(
                Problem("calendar", slug, "tenant", f"unknown tenant {slug!r}")
            )
        if calendar.zone != DEFAULT_ZONE and calendar.zone not in rules.zones:
            problems.append(
                Problem(
                    "calendar",
                    slug,
                    "zone",
                    f"zone {calendar.zone!r} has no rule in the snapshot's zones",
                )
            )
    return problems


def _route_problems(rules: Rules) -> list[Problem]:
    problems = []
    for slug, route in rules.routes.items():
        try:
            RouteTable([route])
        except PatternError as exc:
            problems.append(Problem("route", slug, "path", str(exc)))
        if route.max_cost is not None and route.max_cost < route.cost:
            problems.append(
                Problem(
                    "route",
                    slug,
                    "max_cost",
                    f"must be at least the route's cost ({route.cost}): a request"
                    " may declare a cost up to max_cost",
                )
            )
    if not problems:
        try:
            RouteTable(rules.routes.values())
        except PatternError as exc:
            problems.append(Problem("route", "*", "methods", str(exc)))
    return problems


def _policy_problems(rules: Rules, policy: Policy, max_cost: int) -> list[Problem]:
    ref = policy_ref(policy)
    problems = [
        Problem("policy", ref, field, message)
        for field, message in _scope_errors(rules, policy)
    ]
    if policy.route != ALL_ROUTES and policy.route not in rules.routes:
        problems.append(
            Problem("policy", ref, "route", f"unknown route {policy.route!r}")
        )
        return problems
    route = rules.routes.get(policy.route)
    return problems + policy_problems(
        policy, route_cost=route.largest_cost if route else max_cost
    )


def policy_problems(policy: Policy, *, route_cost: int) -> list[Problem]:
    """Problems of one policy's limits, given the most a request of its route may cost
    (``Route.largest_cost``; the largest of all routes for ``*``)."""
    ref = policy_ref(policy)
    problems = []
    if not any(not limit.shadow for limit in policy.limits):
        problems.append(
            Problem(
                "policy",
                ref,
                "limits",
                "needs at least one limit that is not shadow, or requests would be unlimited",
            )
        )
    seen: set[tuple[str, int | str]] = set()
    for index, limit in enumerate(policy.limits):
        problems += [
            Problem("policy", ref, f"limits[{index}]{field}", message)
            for field, message in kind_of(limit).problems(
                limit, cost=limit.cost or route_cost
            )
        ]
        if (limit.dimension, limit.period) in seen:
            problems.append(
                Problem(
                    "policy",
                    ref,
                    f"limits[{index}]",
                    f"two limits per {limit.dimension} over the same period",
                )
            )
        seen.add((limit.dimension, limit.period))
    return problems + _hot_problems(policy) + _concurrency_problems(policy)


def _hot_problems(policy: Policy) -> list[Problem]:
    """Leases and concurrency limits are decided by ``hot.lua``, which knows GCRA only."""
    leased = any(limit.lease for limit in policy.limits if kind_of(limit) is GCRA)
    if not policy.concurrency and not leased:
        return []
    return [
        Problem(
            "policy",
            policy_ref(policy),
            f"limits[{index}]",
            "a policy with leases or concurrency limits holds GCRA limits only, "
            f"not {kind_of(limit).name}",
        )
        for index, limit in enumerate(policy.limits)
        if kind_of(limit) is not GCRA
    ]


def _concurrency_problems(policy: Policy) -> list[Problem]:
    ref, problems, seen = policy_ref(policy), [], set()
    for index, cap in enumerate(policy.concurrency):
        field = f"concurrency[{index}]"
        if cap.timeout > MAX_TIMEOUT:
            problems.append(
                Problem("policy", ref, f"{field}.timeout", f"at most {MAX_TIMEOUT} s")
            )
        if cap.dimension in seen:
            message = f"two concurrency limits per {cap.dimension}"
            problems.append(Problem("policy", ref, field, message))
        seen.add(cap.dimension)
    return problems


def _scope_errors(rules: Rules, policy: Policy) -> list[tuple[str, str]]:
    kind, subject = policy.scope_kind, policy.subject
    if kind == ScopeKind.DEFAULT and subject:
        return [("scope", "the default scope takes no subject")]
    if kind == ScopeKind.TIER and subject not in rules.tiers:
        return [("scope", f"unknown tier {subject!r}")]
    if kind == ScopeKind.TENANT and subject not in rules.tenants:
        return [("scope", f"unknown tenant {subject!r}")]
    if policy.is_override and kind != ScopeKind.TENANT:
        return [("expires_at", "only tenant policies can expire")]
    return []
