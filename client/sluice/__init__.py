"""Sluice's enforcement client: what API gateways embed to decide admit or 429.

Depends on ``redis`` and ``cryptography`` (bundles are signed: :mod:`.signing`);
it never imports Django (``sluice.django`` is the
optional adapter, imported only by who uses it). The snapshot format and the
resolver defined here are the ones the control plane publishes and explains with.
"""

from __future__ import annotations

from .aio import AsyncLimiter
from .bucket import AsyncTokenBucket, TokenBucket, connect, connect_async
from .bundle import (
    Bundle,
    SnapshotProvider,
    StaticSource,
    fallback_snapshot,
    parse_bundle,
    parse_bundle_bytes,
    read_bundle_file,
)
from .concurrency import LocalSlots
from .decision import Decision, Held, LimitStatus, Outcome
from .errors import EnforcementError, SnapshotError
from .failure import BreakerState, CircuitBreaker, LocalBuckets
from .headers import error_response, rate_limit_headers, retry_after_seconds
from .hotkeys import Leases, RejectCache
from .identity import Identity, TrustedProxies, client_ip
from .limiter import Limiter
from .memory import MemoryStore
from .metrics import STREAM_KEY, DecisionEvents
from .parsing import parse_rules
from .rehearsal import Rehearsed
from .resolver import Level, Resolution, Resolver, resolve
from .routing import PatternError, RouteTable, parse_path_pattern
from .rules import (
    ALL_ROUTES,
    DEFAULT_SCOPE,
    ConcurrencyLimit,
    Dimension,
    FailureMode,
    Limit,
    Policy,
    Route,
    Rules,
    ScopeKind,
    describe_limit,
    fallback_rules,
)
from .rulesfile import RulesFile, RulesFileError, rules_from_file
from .signing import KeyRing
from .snapshot import Snapshot
from .source import PollResult, SnapshotSource
from .validation import Problem, validate_rules

__all__ = [
    "ALL_ROUTES",
    "DEFAULT_SCOPE",
    "STREAM_KEY",
    "AsyncLimiter",
    "AsyncTokenBucket",
    "BreakerState",
    "Bundle",
    "CircuitBreaker",
    "ConcurrencyLimit",
    "Decision",
    "DecisionEvents",
    "Dimension",
    "EnforcementError",
    "FailureMode",
    "Held",
    "Identity",
    "KeyRing",
    "Leases",
    "Level",
    "Limit",
    "LimitStatus",
    "Limiter",
    "LocalBuckets",
    "LocalSlots",
    "MemoryStore",
    "Outcome",
    "PatternError",
    "Policy",
    "PollResult",
    "Problem",
    "Rehearsed",
    "RejectCache",
    "Resolution",
    "Resolver",
    "Route",
    "RouteTable",
    "Rules",
    "RulesFile",
    "RulesFileError",
    "ScopeKind",
    "Snapshot",
    "SnapshotError",
    "SnapshotProvider",
    "SnapshotSource",
    "StaticSource",
    "TokenBucket",
    "TrustedProxies",
    "client_ip",
    "connect",
    "connect_async",
    "describe_limit",
    "error_response",
    "fallback_rules",
    "fallback_snapshot",
    "parse_bundle",
    "parse_bundle_bytes",
    "parse_path_pattern",
    "parse_rules",
    "rate_limit_headers",
    "read_bundle_file",
    "resolve",
    "retry_after_seconds",
    "rules_from_file",
    "validate_rules",
]
