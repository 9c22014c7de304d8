"""Sluice's enforcement client: what API gateways embed to decide admit or 429.

Depends on ``redis`` and ``cryptography`` (bundles are signed: :mod:`.signing`);
it never imports Django (``sluice.django`` is the
optional adapter, imported only by who uses it). The snapshot format and the
resolver defined here are the ones the control plane publishes and explains with.

``import sluice`` imports nothing else: each name below is imported from its
submodule the first time it is used (module ``__getattr__``, PEP 562), so a
process pays for what its decision path needs (``sluice.Limiter``: the sync
path and redis-py; not asyncio, the poller, YAML or the adapters).
``docs/benchmarks.md`` has the figures (``bench/import_time.py``).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

#: name -> the submodule that defines it
_EXPORTS = {
    "ALL_ROUTES": "rules",
    "AsyncLimiter": "aio",
    "AsyncTokenBucket": "bucket",
    "BreakerState": "failure",
    "Bundle": "bundle",
    "CircuitBreaker": "failure",
    "ConcurrencyLimit": "rules",
    "DEFAULT_SCOPE": "rules",
    "Decision": "decision",
    "DecisionEvents": "metrics",
    "Dimension": "rules",
    "EnforcementError": "errors",
    "FailureMode": "rules",
    "Held": "decision",
    "Identity": "identity",
    "KeyRing": "signing",
    "Leases": "hotkeys",
    "Level": "resolver",
    "Limit": "rules",
    "LimitStatus": "decision",
    "Limiter": "limiter",
    "LocalBuckets": "failure",
    "LocalSlots": "concurrency",
    "MemoryStore": "memory",
    "Outcome": "decision",
    "PatternError": "routing",
    "Policy": "rules",
    "PollResult": "source",
    "Problem": "validation",
    "Rehearsed": "rehearsal",
    "RejectCache": "hotkeys",
    "Resolution": "resolver",
    "Resolver": "resolver",
    "Route": "rules",
    "RouteTable": "routing",
    "Rules": "rules",
    "RulesFile": "rulesfile",
    "RulesFileError": "rulesfile",
    "STREAM_KEY": "metrics",
    "ScopeKind": "rules",
    "Snapshot": "snapshot",
    "SnapshotError": "errors",
    "SnapshotProvider": "bundle",
    "SnapshotSource": "source",
    "StaticSource": "bundle",
    "TokenBucket": "bucket",
    "TrustedProxies": "identity",
    "client_ip": "identity",
    "connect": "bucket",
    "connect_async": "bucket",
    "describe_limit": "rules",
    "error_response": "headers",
    "fallback_rules": "rules",
    "fallback_snapshot": "bundle",
    "parse_bundle": "bundle",
    "parse_bundle_bytes": "bundle",
    "parse_path_pattern": "routing",
    "parse_rules": "parsing",
    "rate_limit_headers": "headers",
    "read_bundle_file": "bundle",
    "resolve": "resolver",
    "retry_after_seconds": "headers",
    "rules_from_file": "rulesfile",
    "validate_rules": "validation",
}


def __getattr__(name: str) -> Any:
    """Import ``name`` from its submodule on first use, then keep it here."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'sluice' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


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
