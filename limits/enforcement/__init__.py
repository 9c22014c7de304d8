"""Sluice's enforcement client: what API gateways embed to decide admit or 429.

Depends on ``redis`` only; it never imports Django (``limits.enforcement.django``
is the optional adapter). The snapshot format and the resolver defined here are
the ones the control plane publishes and explains with.
"""

from __future__ import annotations

from .errors import EnforcementError, SnapshotError
from .resolver import Level, Resolution, Resolver, resolve
from .routing import PatternError, RouteTable, parse_path_pattern
from .snapshot import (
    ALL_ROUTES,
    DEFAULT_SCOPE,
    Dimension,
    FailureMode,
    Limit,
    Policy,
    Route,
    Rules,
    ScopeKind,
    Snapshot,
    describe_limit,
    fallback_rules,
)
from .validation import Problem, validate_rules

__all__ = [
    "ALL_ROUTES",
    "DEFAULT_SCOPE",
    "Dimension",
    "EnforcementError",
    "FailureMode",
    "Level",
    "Limit",
    "PatternError",
    "Policy",
    "Problem",
    "Resolution",
    "Resolver",
    "Route",
    "RouteTable",
    "Rules",
    "ScopeKind",
    "Snapshot",
    "SnapshotError",
    "describe_limit",
    "fallback_rules",
    "parse_path_pattern",
    "resolve",
    "validate_rules",
]
