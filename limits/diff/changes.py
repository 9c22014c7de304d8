"""The change records of a diff, and how each kind of object is compared and told.

One builder per kind of object (tier, tenant, route, policy) returns a
:class:`Change`; ``limits.diff.diffing`` calls them for every object that differs.
Words reuse the snapshot module's formatters (``describe_limit``,
``Policy.describe``) so that a limit reads the same everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from limits.diff.impact import Affected, Reach, compare_policies, worst
from limits.diff.kinds import ChangeKind
from limits.diff.limit_changes import (
    FieldChange,
    LimitChange,
    cap_changes,
    everything,
    limit_changes,
)
from sluice.model import (
    Calendar,
    Policy,
    Route,
    Rules,
    describe_limit,
    policy_ref,
)

__all__ = [
    "Change",
    "FieldChange",
    "LimitChange",
    "policy_change",
    "route_change",
    "tenant_change",
    "tier_change",
]

_ROUTE_FIELDS = ("methods", "path", "cost", "failure_mode", "max_cost")


@dataclass(frozen=True)
class Change:
    """One tier, tenant, route or policy that differs between the two rule sets."""

    subject: str  #: "tier", "tenant", "route" or "policy"
    key: str  #: a slug; for a policy ``scope/route``, ``~`` marking an override
    kind: ChangeKind
    text: str  #: the change in words
    affected: Affected  #: whose effective limits it can change
    fields: tuple[FieldChange, ...] = ()
    limits: tuple[LimitChange, ...] = ()
    #: for new and removed policies and tenant moves: raised or lowered against
    #: what applied before (or applies after) at the same scope and route
    direction: ChangeKind | None = None

    @property
    def lowers(self) -> bool:
        """Whether some client can get less than before: what needs notice."""
        return ChangeKind.LOWERED in (self.kind, self.direction)

    def to_json(self) -> dict:
        return {
            "subject": self.subject,
            "key": self.key,
            "kind": self.kind.value,
            "direction": self.direction.value if self.direction else None,
            "lowers": self.lowers,
            "text": self.text,
            "fields": [f.to_json() for f in self.fields],
            "limits": [lim.to_json() for lim in self.limits],
            "affected": self.affected.to_json(),
        }

    @classmethod
    def from_json(cls, data: dict) -> Change:
        """The change back from its stored form (``to_json``)."""
        return cls(
            subject=data["subject"],
            key=data["key"],
            kind=ChangeKind(data["kind"]),
            text=data["text"],
            affected=Affected.from_json(data["affected"]),
            fields=tuple(FieldChange.from_json(f) for f in data["fields"]),
            limits=tuple(LimitChange.from_json(lim) for lim in data["limits"]),
            direction=ChangeKind(data["direction"]) if data["direction"] else None,
        )


def tier_change(slug: str, was: str | None, now: str | None) -> Change:
    """A tier added, removed or renamed: names change no one's limits."""
    fields = (FieldChange("name", was, now),)
    if was is None:
        return Change(
            "tier", slug, ChangeKind.NEW, f"new tier {slug} ({now})", Affected(), fields
        )
    if now is None:
        return Change(
            "tier", slug, ChangeKind.REMOVED, f"tier {slug} removed", Affected(), fields
        )
    text = f"tier {slug} renamed: {was} → {now}"
    return Change("tier", slug, ChangeKind.CHANGED, text, Affected(), fields)


def tenant_change(
    slug: str,
    was: str | None,
    now: str | None,
    *,
    reach: Reach,
    calendars: tuple[Calendar | None, Calendar | None] = (None, None),
) -> Change:
    """A tenant added, removed, moved to another tier (classified by what it gets),
    or given another calendar (``calendars``: before and after, None for UTC and
    billing day 1)."""
    affected = reach.tenant(slug)
    before, after = (calendar or _NO_CALENDAR for calendar in calendars)
    if was is None:
        text = f"new tenant {slug} on tier {now}{_calendar_said(after)}"
        fields = (FieldChange("tier", was, now), *_calendar_fields(None, after))
        return Change("tenant", slug, ChangeKind.NEW, text, affected, fields)
    if now is None:
        text = f"tenant {slug} removed (was on tier {was})"
        fields = (FieldChange("tier", was, now), *_calendar_fields(before, None))
        return Change("tenant", slug, ChangeKind.REMOVED, text, affected, fields)
    said, fields = [], _calendar_fields(before, after)
    direction = None
    if was != now:
        direction = reach.tier_move(was, now)
        said.append(f"moved: tier {was} → tier {now}")
        fields = (FieldChange("tier", was, now), *fields)
    if before != after:
        said.append(_calendar_moved(before, after))
    # A calendar moved alone changes, and lowers, nothing by itself: the quota's
    # period it starts has another start, so its count starts again from zero.
    kind = direction or ChangeKind.CHANGED
    text = f"tenant {slug} {'; '.join(said)}"
    return Change("tenant", slug, kind, text, affected, fields, direction=direction)


_NO_CALENDAR = Calendar()


def _calendar_fields(
    before: Calendar | None, after: Calendar | None
) -> tuple[FieldChange, ...]:
    """``time_zone`` and ``billing_day`` as they moved (all of them for a tenant that
    comes or goes with a calendar that is not the default)."""
    return tuple(
        FieldChange(name, getattr(before, member, None), getattr(after, member, None))
        for name, member in (("time_zone", "zone"), ("billing_day", "billing_day"))
        if getattr(before or _NO_CALENDAR, member)
        != getattr(after or _NO_CALENDAR, member)
    )


def _calendar_said(calendar: Calendar) -> str:
    """`` (time zone Europe/Paris, billing day 17)``, or nothing for the default."""
    parts = [
        f"{field.field.replace('_', ' ')} {field.after}"
        for field in _calendar_fields(None, calendar)
    ]
    return f" ({', '.join(parts)})" if parts else ""


def _calendar_moved(before: Calendar, after: Calendar) -> str:
    """``calendar: time zone UTC → Europe/Paris, billing day 1 → 17 (its calendar
    quotas reset at local midnight in Europe/Paris, billing cycles on day 17)``."""
    moved = ", ".join(
        f"{field.field.replace('_', ' ')} {field.before} → {field.after}"
        for field in _calendar_fields(before, after)
    )
    said = f"its calendar quotas reset at local midnight in {after.zone}"
    if after.billing_day != before.billing_day:
        said += f", billing cycles on day {after.billing_day}"
    return f"calendar: {moved} ({said})"


def route_change(
    slug: str, was: Route | None, now: Route | None, *, reach: Reach
) -> Change:
    """A route added, removed or changed; its cost moves every limit without its own."""
    if was is None or now is None:
        route = now or was
        kind = ChangeKind.NEW if was is None else ChangeKind.REMOVED
        shown = f"{', '.join(route.methods)} {route.path}, cost {route.cost}"
        if route.max_cost is not None:
            shown += f", requests may declare a cost up to {route.max_cost}"
        text = f"new route {slug}: {shown}" if was is None else f"route {slug} removed"
        fields = tuple(
            FieldChange(f, _field(was, f), _field(now, f)) for f in _ROUTE_FIELDS
        )
        return Change("route", slug, kind, text, reach.everyone(), fields)
    fields = tuple(
        FieldChange(f, _field(was, f), _field(now, f))
        for f in _ROUTE_FIELDS
        if _field(was, f) != _field(now, f)
    )
    kinds = [_max_cost_kind(was.max_cost, now.max_cost)]
    if now.cost != was.cost:  # a dearer request is fewer requests
        kinds.append(ChangeKind.LOWERED if now.cost > was.cost else ChangeKind.RAISED)
    said = "; ".join(_said(f) for f in fields)
    kind = worst(kinds)
    return Change(
        "route", slug, kind, f"route {slug}: {said}", reach.everyone(), fields
    )


def policy_change(
    was: Policy | None,
    now: Policy | None,
    *,
    reach: Reach,
    old: Rules,
    new: Rules,
    at: datetime,
) -> Change:
    """A policy added, removed, or with other limits or expiry; ``at``: when ``new`` applies."""
    if was is None:
        return _policy_added(now, reach, new)
    if now is None and was.expires_at is not None and was.expires_at <= at:
        return _expired_override_removed(was)
    if now is None:
        return _policy_removed(was, reach, new)
    cost = _route_cost(new, now)
    limits = limit_changes(was.limits, now.limits, cost)
    limits += cap_changes(was.concurrency, now.concurrency)
    fields = ()
    if was.expires_at != now.expires_at:
        fields = (
            FieldChange("expires_at", _time(was.expires_at), _time(now.expires_at)),
        )
    kind = compare_policies(was, now, route_cost=cost)
    said = [lim.text for lim in limits] + [
        f"expires {f.before} → {f.after}" for f in fields
    ]
    text = f"{now.describe()}: {'; '.join(said)}"
    return Change(
        "policy", policy_ref(now), kind, text, reach.policy(now), fields, limits
    )


def _policy_added(policy: Policy, reach: Reach, new: Rules) -> Change:
    before = reach.old.probe.policy_for(policy.scope, policy.route)
    said = "; ".join(describe_limit(lim) for lim in everything(policy))
    text = f"new policy {policy.describe()}: {said}"
    if before is not None:  # None: the first version, nothing to compare with
        text += f" (instead of {before.describe()})"
    return _whole_policy(ChangeKind.NEW, policy, before, policy, text, reach, new)


def _policy_removed(policy: Policy, reach: Reach, new: Rules) -> Change:
    after = reach.new.probe.policy_for(policy.scope, policy.route)
    said = "; ".join(describe_limit(lim) for lim in everything(policy))
    text = (
        f"{policy.describe()} removed (was {said}); {after.describe()} applies instead"
    )
    return _whole_policy(ChangeKind.REMOVED, policy, policy, after, text, reach, new)


def _expired_override_removed(policy: Policy) -> Change:
    """An override cleared away after it expired: it applied to no one any more, so
    removing it lowers nothing (gateways had dropped it at its expiry)."""
    text = f"{policy.describe()} removed (it had expired {_time(policy.expires_at)})"
    return Change("policy", policy_ref(policy), ChangeKind.REMOVED, text, Affected())


def _whole_policy(kind, policy, before, after, text, reach, new) -> Change:
    """A policy that appears or goes, its direction judged against what it replaces."""
    direction = None
    if before is not None:
        cost = _route_cost(new, policy)
        direction = compare_policies(before, after, route_cost=cost)
    new_ = kind == ChangeKind.NEW
    limits = tuple(
        LimitChange(
            lim.dimension,
            getattr(lim, "period", None),
            kind,
            None if new_ else lim,
            lim if new_ else None,
        )
        for lim in everything(policy)
    )
    return Change(
        "policy",
        policy_ref(policy),
        kind,
        text,
        reach.policy(policy),
        limits=limits,
        direction=direction,
    )


def _max_cost_kind(was: int | None, now: int | None) -> ChangeKind:
    """Which way a route's ``max_cost`` moves a client: a higher bound lets a request
    be charged more (fewer requests), so it is a lowering; dropping the bound makes
    requests that declared less than the route's cost pay it, a lowering too."""
    if was == now:
        return ChangeKind.CHANGED
    if was is not None and now is not None and now < was:
        return ChangeKind.RAISED
    return ChangeKind.LOWERED


def _said(change: FieldChange) -> str:
    """One moved member of a route, in words."""
    if change.field != "max_cost":
        return f"{change.field} {_shown(change.before)} → {_shown(change.after)}"
    if change.after is None:
        return "requests may no longer declare a cost (the route's cost applies)"
    if change.before is None:
        return f"requests may now declare a cost up to {change.after}"
    return f"requests may now declare a cost up to {change.after} (was {change.before})"


def _route_cost(rules: Rules, policy: Policy) -> int:
    route = rules.routes.get(policy.route)
    return route.cost if route else 1  # unmatched requests cost one token


def _field(route: Route | None, name: str) -> Any:
    if route is None:
        return None
    value = getattr(route, name)
    return list(value) if isinstance(value, tuple) else getattr(value, "value", value)


def _shown(value: Any) -> str:
    return ", ".join(value) if isinstance(value, list) else str(value)


def _time(moment: datetime | None) -> str | None:
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else None
