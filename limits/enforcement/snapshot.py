"""Snapshot format v1: the one document the control plane publishes and gateways enforce.

The control plane compiles its rule tables into a :class:`Rules` value and wraps it
in a :class:`Snapshot` (version, parent, times, hash). Gateways parse the same
bytes with :meth:`Snapshot.from_bytes`. Nothing else defines the shape: the
JSON Schema in ``docs/snapshot.schema.json`` is checked against this module's
output by the test suite.

Canonical bytes: UTF-8 JSON with sorted keys, no insignificant whitespace, and
no floats (every number is an integer), so that equal rules give equal bytes on
every machine. ``hash`` is the SHA-256 of the canonical document without its
``hash`` member; it is the HTTP ETag of the snapshot.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from .canonical import canonical_json
from .errors import SnapshotError
from .quota import PERIODS, ConcurrencyLimit, Dimension, Limit, describe_limit

__all__ = [
    "ALL_ROUTES",
    "DEFAULT_SCOPE",
    "FORMAT_VERSION",
    "PERIODS",
    "ConcurrencyLimit",
    "Dimension",
    "FailureMode",
    "Limit",
    "Policy",
    "Route",
    "Rules",
    "ScopeKind",
    "Snapshot",
    "canonical_json",
    "describe_limit",
    "fallback_rules",
    "scope_key",
]

FORMAT_VERSION = 1
ALL_ROUTES = "*"
DEFAULT_SCOPE = "default"


class FailureMode(StrEnum):
    """What a gateway does with a route when the limiter's store is unavailable."""

    OPEN = "open"  #: admit, and mark the decision degraded
    CLOSED = "closed"  #: reject with 503: the limiter is at fault, not the client
    LOCAL = "local"  #: enforce a conservative in-process bucket


class ScopeKind(StrEnum):
    """Who a policy applies to, from the most general to the most specific."""

    DEFAULT = "default"
    TIER = "tier"
    TENANT = "tenant"


def scope_key(kind: ScopeKind | str, subject: str | None = None) -> str:
    """Return the scope string used in snapshots: ``default``, ``tier:pro``, ``tenant:acme``."""
    if kind == ScopeKind.DEFAULT:
        return DEFAULT_SCOPE
    if not subject:
        raise ValueError(f"a {kind} scope needs a subject")
    return f"{kind}:{subject}"


@dataclass(frozen=True, slots=True)
class Policy:
    """The limits that apply to one (scope, route) pair; the most specific policy wins whole."""

    scope: str  #: ``default``, ``tier:<slug>`` or ``tenant:<slug>``
    route: str  #: a route slug, or ``*`` for every route
    limits: tuple[Limit, ...]
    expires_at: datetime | None = None  #: set on temporary tenant overrides only
    #: caps on requests in flight (limits of kind "concurrent"); usually empty
    concurrency: tuple[ConcurrencyLimit, ...] = ()
    _expires_ts: float = field(init=False, repr=False, compare=False, default=0.0)

    def __post_init__(self) -> None:
        if self.expires_at is not None:  # the format keeps whole seconds
            object.__setattr__(self, "expires_at", _whole_seconds(self.expires_at))
        ts = self.expires_at.timestamp() if self.expires_at else float("inf")
        object.__setattr__(self, "_expires_ts", ts)

    @property
    def scope_kind(self) -> ScopeKind:
        return ScopeKind(self.scope.partition(":")[0])

    @property
    def subject(self) -> str | None:
        """The tier or tenant slug of the scope; None for the default scope."""
        return self.scope.partition(":")[2] or None

    @property
    def is_override(self) -> bool:
        """True for a temporary policy: it beats the permanent one of its (scope, route)."""
        return self.expires_at is not None

    @property
    def key(self) -> tuple[str, str, bool]:
        """Identity of the policy within a rule set (stable across versions)."""
        return (self.scope, self.route, self.is_override)

    def is_live(self, now: float) -> bool:
        """Whether the policy applies at ``now`` (epoch seconds): expired overrides do not."""
        return now < self._expires_ts

    def describe(self) -> str:
        """Say where the policy applies, as people read it: ``tier pro · search``."""
        scope = (
            "default"
            if self.scope == DEFAULT_SCOPE
            else self.scope.replace(":", " ", 1)
        )
        route = "all routes" if self.route == ALL_ROUTES else self.route
        override = " (override)" if self.is_override else ""
        return f"{scope} · {route}{override}"

    def to_json(self) -> dict[str, Any]:
        data = {
            "scope": self.scope,
            "route": self.route,
            "expires_at": _format_time(self.expires_at) if self.expires_at else None,
            "limits": [
                limit.to_json() for limit in sorted(self.limits, key=Limit.sort_key)
            ],
        }
        if self.concurrency:  # optional member: absent keeps older bytes unchanged
            ordered = sorted(self.concurrency, key=ConcurrencyLimit.sort_key)
            data["concurrency"] = [limit.to_json() for limit in ordered]
        return data


@dataclass(frozen=True, slots=True)
class Route:
    """A named API operation that requests are matched to by method and path."""

    slug: str
    methods: tuple[str, ...]  #: upper-case HTTP methods, sorted
    path: str  #: pattern such as ``/v1/orders/{id}``
    cost: int = 1  #: tokens a request takes unless a limit overrides it
    failure_mode: FailureMode = FailureMode.OPEN

    def to_json(self) -> dict[str, Any]:
        return {
            "methods": sorted(self.methods),
            "path": self.path,
            "cost": self.cost,
            "failure_mode": self.failure_mode.value,
        }


@dataclass(frozen=True, slots=True)
class Rules:
    """A complete rule set: what a snapshot carries besides its version metadata."""

    tiers: Mapping[str, str]  #: tier slug -> display name
    tenants: Mapping[str, str]  #: tenant slug -> tier slug
    routes: Mapping[str, Route]  #: route slug -> route
    policies: tuple[Policy, ...]
    #: canonical bytes, computed once (a rule set is immutable; 6 MB with 100k tenants)
    _canonical: bytes | None = field(
        default=None, init=False, repr=False, compare=False
    )

    def to_json(self) -> dict[str, Any]:
        policies = sorted(self.policies, key=lambda p: p.key)
        return {
            "tiers": {slug: {"name": name} for slug, name in self.tiers.items()},
            "tenants": dict(self.tenants),
            "routes": {slug: route.to_json() for slug, route in self.routes.items()},
            "policies": [policy.to_json() for policy in policies],
        }

    def canonical_bytes(self) -> bytes:
        """``canonical_json(self.to_json())``, serialized on the first call only."""
        if self._canonical is None:
            object.__setattr__(self, "_canonical", canonical_json(self.to_json()))
        return self._canonical  # type: ignore[return-value]

    def digest(self) -> str:
        """SHA-256 of the canonical rules: equal for equal rules, whatever their version."""
        return hashlib.sha256(self.canonical_bytes()).hexdigest()

    @classmethod
    def from_json(cls, data: Any) -> Rules:
        """Parse and validate rules; raise SnapshotError naming the first bad member."""
        from ._parse import parse_rules  # the parser is long; keep this module readable

        return parse_rules(data)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """An immutable, versioned rule set as published by the control plane."""

    version: int  #: 1, 2, 3...; 0 for the built-in fallback
    parent: int | None  #: the version this one was published after
    published_at: datetime
    effective_at: datetime  #: when gateways start enforcing it
    rules: Rules
    hash: str  #: SHA-256 of the canonical document without this member; the ETag

    @classmethod
    def build(
        cls,
        *,
        version: int,
        parent: int | None,
        published_at: datetime,
        effective_at: datetime,
        rules: Rules,
    ) -> Snapshot:
        """Return a snapshot whose hash is computed from its canonical document."""
        published_at = _whole_seconds(published_at)
        effective_at = _whole_seconds(effective_at)
        document = _document_bytes(version, parent, published_at, effective_at, rules)
        digest = hashlib.sha256(document).hexdigest()
        return cls(version, parent, published_at, effective_at, rules, digest)

    @property
    def etag(self) -> str:
        """The quoted strong entity tag of the snapshot document."""
        return f'"{self.hash}"'

    def to_json(self) -> dict[str, Any]:
        document = _document(
            self.version, self.parent, self.published_at, self.effective_at, self.rules
        )
        document["hash"] = self.hash
        return document

    def to_bytes(self) -> bytes:
        """The canonical bytes that are served, stored and written to disk."""
        return _document_bytes(
            self.version,
            self.parent,
            self.published_at,
            self.effective_at,
            self.rules,
            digest=self.hash,
        )

    @classmethod
    def from_json(cls, data: Any) -> Snapshot:
        """Parse, validate and verify a snapshot document; raise SnapshotError if it is bad."""
        from ._parse import parse_snapshot

        return parse_snapshot(data)

    @classmethod
    def from_bytes(cls, raw: bytes) -> Snapshot:
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SnapshotError("$", f"not valid JSON: {exc}") from None
        return cls.from_json(data)


def _document(
    version: int,
    parent: int | None,
    published_at: datetime,
    effective_at: datetime,
    rules: Rules,
) -> dict[str, Any]:
    return {
        "format": FORMAT_VERSION,
        "version": version,
        "parent": parent,
        "published_at": _format_time(published_at),
        "effective_at": _format_time(effective_at),
        "rules": rules.to_json(),
    }


def _document_bytes(
    version: int,
    parent: int | None,
    published_at: datetime,
    effective_at: datetime,
    rules: Rules,
    *,
    digest: str | None = None,
) -> bytes:
    """``canonical_json`` of the document (with ``hash`` when given), reusing the
    rules' canonical bytes: with sorted keys and no whitespace the document is
    its small head, ``"rules":`` and those bytes, then ``"version"``, which sorts last.
    """
    head: dict[str, Any] = {
        "format": FORMAT_VERSION,
        "parent": parent,
        "published_at": _format_time(published_at),
        "effective_at": _format_time(effective_at),
    }
    if digest is not None:
        head["hash"] = digest
    tail = canonical_json({"version": version})[1:]  # b'"version":N}'
    return b"".join(
        [canonical_json(head)[:-1], b',"rules":', rules.canonical_bytes(), b",", tail]
    )


def _whole_seconds(moment: datetime) -> datetime:
    if moment.tzinfo is None:
        raise ValueError("snapshot times must be timezone-aware")
    return moment.astimezone(UTC).replace(microsecond=0)


def _format_time(moment: datetime) -> str:
    return _whole_seconds(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


def fallback_rules(*, rate: int = 10, burst: int = 20) -> Rules:
    """The built-in rule set of a gateway that has never seen a snapshot: strict, not unlimited."""
    limit = Limit(dimension=Dimension.IP, rate=rate, period=1, burst=burst)
    policy = Policy(scope=DEFAULT_SCOPE, route=ALL_ROUTES, limits=(limit,))
    return Rules(tiers={}, tenants={}, routes={}, policies=(policy,))
