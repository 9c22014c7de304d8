"""What changed in the limits of a policy that exists before and after: buckets and caps.

A token bucket is identified by its dimension and period, a concurrency cap by
its dimension; ``limits.diff.changes`` builds a policy's change from these records.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from limits.diff.impact import bucket_kind, compare_caps
from limits.diff.kinds import ChangeKind
from sluice.model import (
    CalendarQuota,
    ConcurrencyLimit,
    Limit,
    Policy,
    RateLimit,
    SlidingWindow,
    describe_limit,
    kind_of,
    limit_order,
    parse_concurrency,
    parse_limit,
    quota_name,
)

__all__ = [
    "FieldChange",
    "LimitChange",
    "cap_changes",
    "everything",
    "limit_changes",
]

_LIMIT_FIELDS = ("rate", "burst", "cost", "shadow", "shards", "lease", "lease_ms")
_WINDOW_FIELDS = ("limit", "cost", "shadow")
_QUOTA_FIELDS = ("limit", "cost", "shadow")
_CAP_FIELDS = ("max_inflight", "timeout", "shadow")


@dataclass(frozen=True)
class FieldChange:
    """One member that moved: ``cost: 1 → 2``."""

    field: str
    before: Any
    after: Any

    def to_json(self) -> dict:
        return {"field": self.field, "before": self.before, "after": self.after}

    @classmethod
    def from_json(cls, data: dict) -> FieldChange:
        return cls(data["field"], data["before"], data["after"])


@dataclass(frozen=True)
class LimitChange:
    """One token bucket of a policy, identified by dimension and period, or one
    concurrency cap, identified by dimension (its ``period`` is None)."""

    dimension: str
    period: int | str | None  #: a quota's is a word (``month-billing``)
    kind: ChangeKind  #: new, removed, or its direction for a client
    before: RateLimit | ConcurrencyLimit | None
    after: RateLimit | ConcurrencyLimit | None
    fields: tuple[FieldChange, ...] = ()

    @property
    def text(self) -> str:
        if isinstance(self.before, CalendarQuota) and isinstance(
            self.after, CalendarQuota
        ):
            return _quota_moved(self.before, self.after)
        if self.before is None:
            return f"new limit {describe_limit(self.after)}"
        if self.after is None:
            return f"no more limit {describe_limit(self.before)}"
        was, now = describe_limit(self.before), describe_limit(self.after)
        subject, _, rest = now.partition(": ")
        return f"{was} → {rest if was.startswith(subject + ': ') else now}"

    def to_json(self) -> dict:
        return {
            "dimension": self.dimension,
            "period": self.period,
            "kind": self.kind.value,
            "before": self.before.to_json() if self.before else None,
            "after": self.after.to_json() if self.after else None,
            "fields": [f.to_json() for f in self.fields],
            "text": self.text,
        }

    @classmethod
    def from_json(cls, data: dict) -> LimitChange:
        """The change back from its stored form (``to_json``); ``text`` is told again
        from the limits, in the same words."""
        read = parse_concurrency if data["period"] is None else parse_limit
        return cls(
            dimension=data["dimension"],
            period=data["period"],
            kind=ChangeKind(data["kind"]),
            before=read(data["before"]) if data["before"] else None,
            after=read(data["after"]) if data["after"] else None,
            fields=tuple(FieldChange.from_json(f) for f in data["fields"]),
        )


def limit_changes(
    was: tuple[RateLimit, ...], now: tuple[RateLimit, ...], cost: int
) -> tuple[LimitChange, ...]:
    old = {(lim.dimension, lim.period): lim for lim in was}
    new = {(lim.dimension, lim.period): lim for lim in now}
    changes = []
    for key in sorted(old.keys() | new.keys(), key=_limit_key_order):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        if before is None or after is None:
            kind = ChangeKind.NEW if before is None else ChangeKind.REMOVED
            changes.append(LimitChange(key[0], key[1], kind, before, after))
            continue
        fields = _rate_fields(before, after)
        changes.append(
            LimitChange(
                key[0], key[1], bucket_kind(before, after, cost), before, after, fields
            )
        )
    return tuple(changes)


def _limit_key_order(key: tuple[str, int | str]) -> tuple[str, int, int | str]:
    """Keys by dimension, then buckets' and windows' periods in seconds, then
    quotas' (``day``, ``month``...): ints and words do not compare."""
    dimension, period = key
    return (dimension, 1, period) if isinstance(period, str) else (dimension, 0, period)


def _rate_fields(before: RateLimit, after: RateLimit) -> tuple[FieldChange, ...]:
    """The members that moved; a limit that changed kind says that alone (the two
    kinds' numbers do not compare, as ``compare_limit`` says too)."""
    if type(before) is not type(after):
        return (FieldChange("kind", kind_of(before).name, kind_of(after).name),)
    names = (
        _QUOTA_FIELDS
        if isinstance(before, CalendarQuota)
        else _WINDOW_FIELDS
        if isinstance(before, SlidingWindow)
        else _LIMIT_FIELDS
    )
    return tuple(
        FieldChange(f, getattr(before, f), getattr(after, f))
        for f in names
        if getattr(before, f) != getattr(after, f)
    )


def _quota_moved(before: CalendarQuota, after: CalendarQuota) -> str:
    """``per tenant: monthly quota lowered from 10,000 to 5,000 calls``, then any
    other member that moved (a quota is identified by its dimension, per and cycle,
    so those never move)."""
    subject = describe_limit(after).partition(": ")[0]
    said = []
    if before.limit != after.limit:
        way = "lowered" if after.limit < before.limit else "raised"
        said.append(
            f"{quota_name(after)} {way} from {before.limit:,} to {after.limit:,} calls"
        )
    if before.cost != after.cost:
        said.append(f"cost {_cost(before.cost)} → {_cost(after.cost)}")
    if before.shadow != after.shadow:
        said.append("now shadow (never rejects)" if after.shadow else "now enforced")
    if not said:  # only its public words moved
        said.append(
            f"{quota_name(after)} of {after.limit:,} calls: public words changed"
        )
    return f"{subject}: {'; '.join(said)}"


def _cost(cost: int | None) -> str:
    return "the route's" if cost is None else str(cost)


def cap_changes(
    was: tuple[ConcurrencyLimit, ...], now: tuple[ConcurrencyLimit, ...]
) -> tuple[LimitChange, ...]:
    old = {cap.dimension: cap for cap in was}
    new = {cap.dimension: cap for cap in now}
    changes = []
    for key in sorted(old.keys() | new.keys()):
        before, after = old.get(key), new.get(key)
        if before == after:
            continue
        fields = tuple(
            FieldChange(f, getattr(before, f), getattr(after, f))
            for f in _CAP_FIELDS
            if before and after and getattr(before, f) != getattr(after, f)
        )
        kind = compare_caps([before] if before else [], [after] if after else [])
        if before is None or after is None:
            kind = ChangeKind.NEW if before is None else ChangeKind.REMOVED
        changes.append(LimitChange(key, None, kind, before, after, fields))
    return tuple(changes)


def everything(policy: Policy) -> list[RateLimit | ConcurrencyLimit]:
    caps = sorted(policy.concurrency, key=ConcurrencyLimit.sort_key)
    return [*_sorted(policy.limits), *caps]


def _sorted(limits: tuple[Limit, ...]) -> list[Limit]:
    return sorted(limits, key=limit_order)
