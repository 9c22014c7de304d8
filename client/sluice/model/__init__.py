"""The pure model of Sluice: what a rule set is, and what its limits mean.

The value types (tiers, tenants, routes, policies, limits), their parsing,
canonical form and validation, the resolver and the route table, and the limit
kinds (:mod:`sluice.kinds`, one per algorithm). Everything here is pure: it imports
neither redis nor the runtime (the limiter, the scripts, the stores), which an
import contract in ``pyproject.toml`` and ``tests/client/test_model.py`` (redis
made unimportable) enforce. The control plane imports the client through this
module only for the format; gateways enforce with the very same types.

The names live in their own modules (``sluice.rules``, ``sluice.resolver``...),
which stay importable as they are; this module gathers them in one place.
"""

from __future__ import annotations

from sluice.calendar import (
    Calendar,
    ZoneRule,
    local_to_utc,
    parse_zone_rule,
    period_bounds,
    utc_offset,
)
from sluice.canonical import canonical_json
from sluice.errors import (
    EnforcementError,
    SnapshotError,
)
from sluice.kinds import (
    GCRA,
    Advertised,
    Direction,
    LimitKind,
    Shape,
    kind_of,
    limit_order,
    register,
    registered,
    unregister,
)
from sluice.kinds.gcra import (
    Gcra,
    Geometry,
    admits,
    geometry,
)
from sluice.kinds.quota import (
    CALENDAR_QUOTA,
    CalendarQuotaKind,
    Quota,
    quota_name,
)
from sluice.kinds.sliding import (
    SLIDING_WINDOW,
    Sliding,
    SlidingKind,
)
from sluice.parsing import (
    parse_calendar_quota,
    parse_concurrency,
    parse_limit,
    parse_policy,
    parse_route,
    parse_rules,
    parse_sliding_window,
    parse_snapshot_fields,
)
from sluice.quota import (
    DEFAULT_LEASE_MS,
    DEFAULT_TIMEOUT,
    MAX_LEASE_MS,
    MAX_PUBLIC_DESCRIPTION,
    MAX_PUBLIC_NAME,
    MAX_SHARDS,
    MAX_TIMEOUT,
    PERIOD_WORDS,
    PERIODS,
    QUOTA_CYCLES,
    QUOTA_PERIODS,
    CalendarQuota,
    ConcurrencyLimit,
    Dimension,
    Limit,
    RateLimit,
    SlidingWindow,
    describe_limit,
    limit_in_words,
    public_description,
    public_name,
)
from sluice.resolver import (
    Candidate,
    Level,
    Resolution,
    Resolver,
    resolve,
)
from sluice.routing import (
    HTTP_METHODS,
    PatternError,
    RouteTable,
    parse_path_pattern,
)
from sluice.rules import (
    ALL_ROUTES,
    DEFAULT_SCOPE,
    FailureMode,
    Policy,
    Route,
    Rules,
    ScopeKind,
    fallback_rules,
    format_time,
    scope_key,
    whole_seconds,
)
from sluice.snapshot import (
    FORMAT_VERSION,
    Snapshot,
)
from sluice.validation import (
    Problem,
    policy_problems,
    policy_ref,
    validate_rules,
)

__all__ = [
    "ALL_ROUTES",
    "CALENDAR_QUOTA",
    "DEFAULT_LEASE_MS",
    "DEFAULT_SCOPE",
    "DEFAULT_TIMEOUT",
    "FORMAT_VERSION",
    "GCRA",
    "HTTP_METHODS",
    "MAX_LEASE_MS",
    "MAX_PUBLIC_DESCRIPTION",
    "MAX_PUBLIC_NAME",
    "MAX_SHARDS",
    "MAX_TIMEOUT",
    "PERIODS",
    "PERIOD_WORDS",
    "QUOTA_CYCLES",
    "QUOTA_PERIODS",
    "SLIDING_WINDOW",
    "Advertised",
    "Calendar",
    "CalendarQuota",
    "CalendarQuotaKind",
    "Candidate",
    "ConcurrencyLimit",
    "Dimension",
    "Direction",
    "EnforcementError",
    "FailureMode",
    "Gcra",
    "Geometry",
    "Level",
    "Limit",
    "LimitKind",
    "PatternError",
    "Policy",
    "Problem",
    "Quota",
    "RateLimit",
    "Resolution",
    "Resolver",
    "Route",
    "RouteTable",
    "Rules",
    "ScopeKind",
    "Shape",
    "Sliding",
    "SlidingKind",
    "SlidingWindow",
    "Snapshot",
    "SnapshotError",
    "ZoneRule",
    "admits",
    "canonical_json",
    "describe_limit",
    "fallback_rules",
    "format_time",
    "geometry",
    "kind_of",
    "limit_in_words",
    "limit_order",
    "local_to_utc",
    "parse_calendar_quota",
    "parse_concurrency",
    "parse_limit",
    "parse_path_pattern",
    "parse_policy",
    "parse_route",
    "parse_rules",
    "parse_sliding_window",
    "parse_snapshot_fields",
    "parse_zone_rule",
    "period_bounds",
    "policy_problems",
    "policy_ref",
    "public_description",
    "public_name",
    "quota_name",
    "register",
    "registered",
    "resolve",
    "scope_key",
    "unregister",
    "utc_offset",
    "validate_rules",
    "whole_seconds",
]
