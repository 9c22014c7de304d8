"""What changed between two rule sets: structured for code, in words for people.

:func:`rules_diff` compares two :class:`~sluice.snapshot.Rules` (two
versions, or the working copy and the active version) and returns a
:class:`RulesDiff`: one :class:`Change` per tier, tenant, route or policy that
differs, each with

* ``kind``: new, removed, raised, lowered or changed (``ChangeKind``);
* ``fields``: what moved, field by field, before and after;
* ``limits`` (policies): the same per token bucket, keyed by dimension and period;
* ``direction`` (new and removed policies, tenant moves): raised, lowered or
  changed, judged against what applied before (or applies after) at the same
  scope and route, so that a new, stricter policy counts as a lowering;
* ``affected``: the tiers and tenants whose effective limits it can change;
* ``text``: one line in words, e.g.
  ``tier pro · search: per tenant: 50 / s, burst 100 → 20 / s, burst 40``.

Raised and lowered are defined in :mod:`limits.diff.impact` (a mixed change, say a
higher rate with a smaller burst, is lowered: some client can be hurt). A diff is
stored with every snapshot as :meth:`RulesDiff.to_json`; announcements read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from limits.diff.changes import (
    Change,
    FieldChange,
    LimitChange,
    policy_change,
    route_change,
    tenant_change,
    tier_change,
)
from limits.diff.impact import Reach
from limits.diff.kinds import ChangeKind
from sluice.model import Policy, Rules

__all__ = [
    "EMPTY_RULES",
    "Change",
    "FieldChange",
    "LimitChange",
    "RulesDiff",
    "rules_diff",
]

EMPTY_RULES = Rules(tiers={}, tenants={}, routes={}, policies=())


@dataclass(frozen=True)
class RulesDiff:
    """Every change between two rule sets, tiers first, then tenants, routes, policies."""

    changes: tuple[Change, ...]
    affected_tiers: tuple[str, ...]  #: union over the changes
    affected_tenants: tuple[str, ...]  #: union, with tier-wide changes expanded
    anonymous: bool  #: requests without a known tenant are affected

    def __bool__(self) -> bool:
        return bool(self.changes)

    @property
    def lowers(self) -> bool:
        return any(change.lowers for change in self.changes)

    def counts(self) -> dict[str, int]:
        """How many changes of each kind: ``{"new": 1, "lowered": 2, ...}``."""
        counts = {kind.value: 0 for kind in ChangeKind}
        for change in self.changes:
            counts[change.kind.value] += 1
        return counts

    def to_json(self) -> dict:
        """The form stored with a snapshot (``Snapshot.diff``) and served by the API.

        Built once per diff and shared: a rules file's diff (120,000 changes for
        a first version) is stored with its change request and with the version,
        so callers must not change what it returns."""
        built = self.__dict__.get("_json")
        if built is None:
            built = self._json_build()
            object.__setattr__(self, "_json", built)  # frozen: a cache, not state
        return built

    def _json_build(self) -> dict:
        return {
            "changes": [change.to_json() for change in self.changes],
            "counts": self.counts(),
            "lowers": self.lowers,
            "affected": {
                "tiers": list(self.affected_tiers),
                "tenants": list(self.affected_tenants),
                "anonymous": self.anonymous,
            },
        }

    @classmethod
    def from_json(cls, data: dict) -> RulesDiff:
        """The diff back from its stored form (``Snapshot.diff``), typed as it was built."""
        affected = data["affected"]
        return cls(
            changes=tuple(Change.from_json(change) for change in data["changes"]),
            affected_tiers=tuple(affected["tiers"]),
            affected_tenants=tuple(affected["tenants"]),
            anonymous=affected["anonymous"],
        )

    def lowered(self) -> list[str]:
        """The words of every change that lowers someone's limits (what needs notice)."""
        return [change.text for change in self.changes if change.lowers]


def rules_diff(
    old: Rules | None, new: Rules, *, at: datetime | None = None
) -> RulesDiff:
    """Compare ``old`` (None: nothing published yet) with ``new``, which applies from
    ``at`` (default: now); overrides expired by then count for no one."""
    at = at or datetime.now(UTC)
    old = old or EMPTY_RULES
    reach = Reach(old, new)
    changes = [
        *_mapping_changes(old.tiers, new.tiers, lambda *a: tier_change(*a)),
        *_tenant_changes(old, new, reach),
        *_mapping_changes(
            old.routes, new.routes, lambda *a: route_change(*a, reach=reach)
        ),
        *_policy_changes(old, new, reach, at),
    ]
    return _summarise(changes, reach)


def _mapping_changes(old: dict, new: dict, make) -> list[Change]:
    keys = sorted(old.keys() | new.keys())
    return [
        make(key, old.get(key), new.get(key))
        for key in keys
        if old.get(key) != new.get(key)
    ]


def _tenant_changes(old: Rules, new: Rules, reach: Reach) -> list[Change]:
    """Tenants added, removed, moved to another tier or given another calendar (the
    periods of its calendar quotas move with it)."""
    slugs = {
        slug
        for slug in old.tenants.keys() | new.tenants.keys()
        if old.tenants.get(slug) != new.tenants.get(slug)
    }
    slugs.update(
        slug
        for slug in old.calendars.keys() | new.calendars.keys()
        if old.calendars.get(slug) != new.calendars.get(slug)
    )
    return [
        tenant_change(
            slug,
            old.tenants.get(slug),
            new.tenants.get(slug),
            reach=reach,
            calendars=(old.calendars.get(slug), new.calendars.get(slug)),
        )
        for slug in sorted(slugs)
    ]


def _policy_changes(old: Rules, new: Rules, reach: Reach, at: datetime) -> list[Change]:
    before = {p.key: p for p in old.policies}
    after = {p.key: p for p in new.policies}
    changes = []
    for key in sorted(before.keys() | after.keys()):
        was, now = before.get(key), after.get(key)
        if not _same(was, now):
            changes.append(
                policy_change(was, now, reach=reach, old=old, new=new, at=at)
            )
    return changes


def _same(a: Policy | None, b: Policy | None) -> bool:
    if a is None or b is None:
        return a is b
    # equal fields are the same policy; otherwise limits are compared as a set, in
    # canonical order (most policies of a small edit are equal: no JSON for them)
    return a == b or a.to_json() == b.to_json()


def _summarise(changes: list[Change], reach: Reach) -> RulesDiff:
    """Union of what the changes reach. Tiers reached whole are expanded once, not
    once per change (a first publish has 120,000 changes; 100,000 tenants)."""
    tiers: set[str] = set()
    tenants: set[str] = set()
    whole: set[str] = set()  #: tiers some change reaches without exceptions
    partial = []
    for change in changes:
        affected = change.affected
        tiers.update(affected.tiers)
        tenants.update(affected.tenants)
        if affected.except_tenants:
            partial.append(affected)
        else:
            whole.update(affected.tiers)
    tenants |= reach.tenants_of(whole)
    for affected in partial:
        rest = [tier for tier in affected.tiers if tier not in whole]
        if rest:
            tenants |= reach.tenants_of(rest).difference(affected.except_tenants)
    return RulesDiff(
        changes=tuple(changes),
        affected_tiers=tuple(sorted(tiers)),
        affected_tenants=tuple(sorted(tenants)),
        anonymous=any(change.affected.anonymous for change in changes),
    )
