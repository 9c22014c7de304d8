"""Rule objects as documents: the vocabulary of change requests and rules files.

A document is a plain JSON-able dict describing one tier, tenant, route or
policy by slugs (never database ids), with everything the rule tables hold
about it: what gateways enforce, and what snapshots do not carry (names,
descriptions, contacts, positions, reasons). A tenant's calendar
(``time_zone``, ``billing_day``) is written only when it is not the default
(UTC, day 1), as the snapshot's ``calendars`` does, so documents of tenants
without one stay as they were. Change requests store their edits
as documents (``ChangeEdit.before`` and ``after``); ``rules export`` writes
them as YAML.

* :func:`row_document` and :func:`documents_of_tables` read rows;
* :func:`rules_value` is the part of a document a snapshot carries, so two
  documents conflict only where gateways would see a difference;
* :func:`rules_with` applies documents to a rule set (``sluice.rules.Rules``).

Documents are canonical: limits sorted as the snapshot sorts them, times as
``format_time`` writes them, every member present (:func:`limit_document`
with ``short=True`` drops the defaults, for files people read).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from limits import models
from limits.choices import LimitKind
from limits.core.zones import UTC, zones_of
from sluice import model as sluice_model
from sluice.model import DEFAULT_LEASE_MS, DEFAULT_TIMEOUT, policy_ref
from sluice.rulesfile import PERIOD_NAMES

__all__ = [
    "PERIOD_NAMES",
    "SUBJECTS",
    "Document",
    "Edit",
    "RuleDocuments",
    "calendar_members",
    "document_in",
    "document_key",
    "document_normalize",
    "documents_in",
    "documents_of_rules",
    "documents_of_tables",
    "limit_document",
    "limit_value",
    "parse_time",
    "policy_document",
    "policy_reasons",
    "policy_row",
    "policy_value",
    "row_document",
    "rules_value",
    "rules_with",
    "tenant_calendar",
    "value_in",
]

Document = dict[str, Any]

#: The kinds of rule objects, in the order they are written (parents first).
SUBJECTS = ("tier", "tenant", "route", "policy")
#: File period names -> seconds; the names (``PERIOD_NAMES``) are the client's
#: (``sluice.rulesfile``, which reads the same files without the control plane).
_PERIODS = {name: seconds for seconds, name in PERIOD_NAMES.items()}


@dataclass(frozen=True)
class Edit:
    """One object changed: its document ``before`` (None: absent) and ``after``
    (None: removed)."""

    subject: str
    key: str
    before: Document | None
    after: Document | None

    @property
    def removes(self) -> bool:
        return self.after is None


def parse_time(text: str) -> datetime:
    """An ISO 8601 time with a zone, as a document carries it; ValueError otherwise."""
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError("a time needs a zone, e.g. 2026-12-01T08:00:00Z")
    return sluice_model.whole_seconds(moment)


# -- tenants' calendars ------------------------------------------------------------


def tenant_calendar(doc: Mapping[str, Any]) -> sluice_model.Calendar:
    """The calendar of a tenant document (UTC and day 1 when it names none)."""
    return sluice_model.Calendar(
        zone=doc.get("time_zone", UTC), billing_day=doc.get("billing_day", 1)
    )


def calendar_members(calendar: sluice_model.Calendar) -> Document:
    """A tenant document's calendar members, each written only when not its default."""
    members: Document = {}
    if calendar.zone != UTC:
        members["time_zone"] = calendar.zone
    if calendar.billing_day != 1:
        members["billing_day"] = calendar.billing_day
    return members


# -- limits ------------------------------------------------------------------------


def limit_document(
    value: sluice_model.RateLimit | sluice_model.ConcurrencyLimit,
    *,
    short: bool = False,
) -> Document:
    """A limit as a document; ``short`` leaves out members at their default."""
    if isinstance(value, sluice_model.ConcurrencyLimit):
        doc: Document = {
            "dimension": value.dimension.value,
            "max_inflight": value.max_inflight,
            "timeout": value.timeout,
            "shadow": value.shadow,
        }
        defaults = {"timeout": DEFAULT_TIMEOUT, "shadow": False}
    elif isinstance(value, sluice_model.CalendarQuota):
        # The snapshot's words, its cycle written only when billing (as there).
        doc = {
            "kind": "calendar_quota",
            "dimension": value.dimension.value,
            "limit": value.limit,
            "per": value.per,
            "cost": value.cost,
            "shadow": value.shadow,
        }
        if value.cycle != "calendar":
            doc["cycle"] = value.cycle
        defaults = {"cost": None, "shadow": False}
    elif isinstance(value, sluice_model.SlidingWindow):
        # The snapshot's words: a window holds a limit, it has no rate or burst.
        doc = {
            "kind": "sliding_window",
            "dimension": value.dimension.value,
            "limit": value.limit,
            "window": PERIOD_NAMES[value.window],
            "cost": value.cost,
            "shadow": value.shadow,
        }
        defaults = {"cost": None, "shadow": False}
    else:
        doc = {
            "dimension": value.dimension.value,
            "rate": value.rate,
            "period": PERIOD_NAMES[value.period],
            "burst": value.burst,
            "cost": value.cost,
            "shadow": value.shadow,
            "shards": value.shards,
            "lease": value.lease,
            "lease_ms": value.lease_ms,
        }
        defaults = {
            "cost": None,
            "shadow": False,
            "shards": 1,
            "lease": 0,
            "lease_ms": DEFAULT_LEASE_MS,
        }
    # Public words are written only when set: documents of limits without them
    # (and the change requests that hold such documents) stay as they were.
    if value.name:
        doc["public_name"] = value.name
    if value.description:
        doc["public_description"] = value.description
    if short:
        doc = {k: v for k, v in doc.items() if k not in defaults or defaults[k] != v}
    return doc


def limit_value(
    doc: Mapping[str, Any],
) -> sluice_model.RateLimit | sluice_model.ConcurrencyLimit:
    """The snapshot value of a limit document (a concurrency cap when it has
    ``max_inflight``, a sliding window when its kind says so); KeyError or
    ValueError for a malformed one."""
    dimension = sluice_model.Dimension(doc["dimension"])
    if "max_inflight" in doc:
        return sluice_model.ConcurrencyLimit(
            dimension=dimension,
            max_inflight=doc["max_inflight"],
            timeout=doc.get("timeout", DEFAULT_TIMEOUT),
            shadow=doc.get("shadow", False),
            name=doc.get("public_name", ""),
            description=doc.get("public_description", ""),
        )
    if doc.get("kind") == "calendar_quota":
        return sluice_model.CalendarQuota(
            dimension=dimension,
            limit=doc["limit"],
            per=doc["per"],
            cycle=doc.get("cycle", "calendar"),
            cost=doc.get("cost"),
            shadow=doc.get("shadow", False),
            name=doc.get("public_name", ""),
            description=doc.get("public_description", ""),
        )
    if doc.get("kind") == "sliding_window":
        window = doc["window"]
        return sluice_model.SlidingWindow(
            dimension=dimension,
            limit=doc["limit"],
            window=_PERIODS[window] if isinstance(window, str) else window,
            cost=doc.get("cost"),
            shadow=doc.get("shadow", False),
            shards=doc.get("shards", 1),
            lease=doc.get("lease", 0),
            name=doc.get("public_name", ""),
            description=doc.get("public_description", ""),
        )
    period = doc["period"]
    return sluice_model.Limit(
        dimension=dimension,
        rate=doc["rate"],
        period=_PERIODS[period] if isinstance(period, str) else period,
        burst=doc["burst"],
        cost=doc.get("cost"),
        shadow=doc.get("shadow", False),
        shards=doc.get("shards", 1),
        lease=doc.get("lease", 0),
        lease_ms=doc.get("lease_ms", DEFAULT_LEASE_MS),
        name=doc.get("public_name", ""),
        description=doc.get("public_description", ""),
    )


# -- policies ----------------------------------------------------------------------


def policy_document(value: sluice_model.Policy, *, reason: str = "") -> Document:
    """A policy as a document: scope, route, expiry, reason and canonical limits."""
    limits = sorted(value.limits, key=sluice_model.limit_order)
    caps = sorted(value.concurrency, key=sluice_model.ConcurrencyLimit.sort_key)
    return {
        "scope": value.scope,
        "route": value.route,
        "expires_at": sluice_model.format_time(value.expires_at)
        if value.expires_at
        else None,
        "reason": reason,
        "limits": [limit_document(limit) for limit in [*limits, *caps]],
    }


def policy_value(doc: Mapping[str, Any]) -> sluice_model.Policy:
    """The snapshot policy of a policy document, its limits in the document's order
    (rate limits, then caps), so problems name the document's own rows."""
    values = [limit_value(limit) for limit in doc["limits"]]
    expires = doc.get("expires_at")
    return sluice_model.Policy(
        scope=doc["scope"],
        route=doc["route"],
        limits=tuple(
            v for v in values if not isinstance(v, sluice_model.ConcurrencyLimit)
        ),
        expires_at=parse_time(expires) if expires else None,
        concurrency=tuple(
            v for v in values if isinstance(v, sluice_model.ConcurrencyLimit)
        ),
    )


def document_key(subject: str, doc: Mapping[str, Any], slug: str = "") -> str:
    """The key of a document: its slug, or for a policy ``scope/route`` (``~``: override)."""
    if subject != "policy":
        return slug
    override = "~" if doc.get("expires_at") else ""
    return f"{doc['scope']}/{doc['route']}{override}"


def document_normalize(subject: str, doc: Mapping[str, Any]) -> Document:
    """The canonical form of a (valid) document: every member present, defaults
    filled in, limits in the snapshot's order, times as the snapshot writes them."""
    if subject == "tier":
        return {
            "name": doc["name"],
            "description": doc.get("description", ""),
            "position": doc.get("position", 0),
        }
    if subject == "tenant":
        return {
            "name": doc["name"],
            "tier": doc["tier"],
            "contacts": list(doc.get("contacts", [])),
            **calendar_members(tenant_calendar(doc)),
        }
    if subject == "route":
        return {
            "description": doc.get("description", ""),
            "methods": sorted(doc["methods"]),
            "path": doc["path"],
            "cost": doc.get("cost", 1),
            "failure_mode": doc.get("failure_mode", "open"),
            **_max_cost(doc.get("max_cost")),
        }
    return policy_document(policy_value(doc), reason=doc.get("reason", ""))


# -- documents of rows ---------------------------------------------------------------


def row_document(row: Any, limits: Iterable[models.Limit] | None = None) -> Document:
    """The document of a tier, tenant, route or policy row (a policy with ``limits``,
    or else its saved limits)."""
    if isinstance(row, models.Tier):
        return {
            "name": row.name,
            "description": row.description,
            "position": row.position,
        }
    if isinstance(row, models.Tenant):
        calendar = sluice_model.Calendar(
            zone=row.time_zone, billing_day=row.billing_day
        )
        return {
            "name": row.name,
            "tier": row.tier.slug,
            "contacts": list(row.contact_emails or []),
            **calendar_members(calendar),
        }
    if isinstance(row, models.Route):
        return {
            "description": row.description,
            "methods": sorted(row.methods),
            "path": row.path_pattern,
            "cost": row.cost,
            "failure_mode": row.failure_mode,
            **_max_cost(row.max_cost),
        }
    rows = row.limits.all() if limits is None else limits
    value = sluice_model.Policy(
        scope=row.scope_key,
        route=row.route_key,
        limits=tuple(_rate(rows)),
        expires_at=row.expires_at,
        concurrency=tuple(_caps(rows)),
    )
    return policy_document(value, reason=row.reason)


def _rate(rows: Iterable[models.Limit]) -> list[sluice_model.RateLimit]:
    """Buckets and sliding windows: the policy's ``limits``."""
    return [r.to_value() for r in rows if r.kind != LimitKind.CONCURRENT]  # type: ignore[misc]


def _caps(rows: Iterable[models.Limit]) -> list[sluice_model.ConcurrencyLimit]:
    return [r.to_value() for r in rows if r.kind == LimitKind.CONCURRENT]  # type: ignore[misc]


@dataclass
class RuleDocuments:
    """A whole rule set as documents: ``tiers[slug]``, ``tenants[slug]``,
    ``routes[slug]``, ``policies[key]``."""

    tiers: dict[str, Document] = field(default_factory=dict)
    tenants: dict[str, Document] = field(default_factory=dict)
    routes: dict[str, Document] = field(default_factory=dict)
    policies: dict[str, Document] = field(default_factory=dict)

    def of(self, subject: str) -> dict[str, Document]:
        return {
            "tier": self.tiers,
            "tenant": self.tenants,
            "route": self.routes,
            "policy": self.policies,
        }[subject]

    def edits_to(self, other: RuleDocuments) -> list[Edit]:
        """What changes from these documents to ``other``, parents first."""
        edits = []
        for subject in SUBJECTS:
            mine, theirs = self.of(subject), other.of(subject)
            for key in sorted(mine.keys() | theirs.keys()):
                if mine.get(key) != theirs.get(key):
                    edits.append(Edit(subject, key, mine.get(key), theirs.get(key)))
        return edits


def documents_of_tables() -> RuleDocuments:
    """The rule tables (the working copy) as documents."""
    docs = RuleDocuments()
    for tier in models.Tier.objects.all():
        docs.tiers[tier.slug] = row_document(tier)
    for tenant in models.Tenant.objects.select_related("tier"):
        docs.tenants[tenant.slug] = row_document(tenant)
    for route in models.Route.objects.all():
        docs.routes[route.slug] = row_document(route)
    policies = models.Policy.objects.select_related(
        "tier", "tenant", "route"
    ).prefetch_related("limits")
    for policy in policies:
        doc = row_document(policy)
        docs.policies[document_key("policy", doc)] = doc
    return docs


def documents_of_rules(
    rules: sluice_model.Rules, *, only: Mapping[str, list[str]] | None = None
) -> RuleDocuments:
    """``rules`` (a published version) as documents, with what snapshots do not carry
    (names, descriptions, contacts, positions, reasons) read from the rule tables;
    an object the tables no longer hold gets empty values (a tenant: its slug as name).
    ``only`` limits the rows read to some slugs (``{"tenants": ["acme"]}``)."""

    def rows(model, part, *fields):
        """(slug -> fields) of the rows: tuples, not model instances (100,000 of them)."""
        found = model.objects.all()
        if only is not None:
            found = found.filter(slug__in=only.get(part, []))
        return {slug: rest for slug, *rest in found.values_list("slug", *fields)}

    tiers = rows(models.Tier, "tiers", "description", "position")
    tenants = rows(models.Tenant, "tenants", "name", "contact_emails")
    routes = rows(models.Route, "routes", "description")
    reasons = policy_reasons() if rules.policies else {}
    docs = RuleDocuments()
    for slug, name in rules.tiers.items():
        description, position = tiers.get(slug, ("", 0))
        docs.tiers[slug] = {
            "name": name,
            "description": description,
            "position": position,
        }
    for slug, tier in rules.tenants.items():
        tenant_name, contacts = tenants.get(slug, (slug, []))
        docs.tenants[slug] = {
            "name": tenant_name,
            "tier": tier,
            "contacts": list(contacts),
            **calendar_members(rules.calendar(slug)),
        }
    for slug, route in rules.routes.items():
        (description,) = routes.get(slug, ("",))
        docs.routes[slug] = {"description": description, **_route_members(route)}
    for policy in rules.policies:
        key = policy_ref(policy)
        docs.policies[key] = policy_document(policy, reason=reasons.get(key, ""))
    return docs


def document_in(rules: sluice_model.Rules, subject: str, key: str) -> Document | None:
    """One object of ``rules`` as a document (None when ``rules`` lack it), with what
    snapshots do not carry read from its row in the rule tables."""
    if subject == "policy":
        value = next((p for p in rules.policies if policy_ref(p) == key), None)
        if value is None:
            return None
        row = policy_row(key)
        return policy_document(value, reason=row.reason if row else "")
    held = {"tier": rules.tiers, "tenant": rules.tenants, "route": rules.routes}
    value = held[subject].get(key)
    if value is None:
        return None
    part = {"tier": "tiers", "tenant": "tenants", "route": "routes"}[subject]
    single = sluice_model.Rules(
        tiers={key: value} if subject == "tier" else {},
        tenants={key: value} if subject == "tenant" else {},
        routes={key: value} if subject == "route" else {},
        policies=(),
        calendars={key: rules.calendars[key]}
        if subject == "tenant" and key in rules.calendars
        else {},
    )
    docs = documents_of_rules(single, only={part: [key]})
    return docs.of(subject)[key]


def documents_in(
    rules: sluice_model.Rules, keys: Iterable[tuple[str, str]]
) -> dict[tuple[str, str], Document | None]:
    """:func:`document_in` for many objects at once, (subject, key) -> document:
    one pass over ``rules`` and a query per table, however many objects."""
    wanted: dict[str, set[str]] = {subject: set() for subject in SUBJECTS}
    for subject, key in keys:
        wanted[subject].add(key)
    if not any(wanted.values()):
        return {}
    some = sluice_model.Rules(
        tiers={k: v for k, v in rules.tiers.items() if k in wanted["tier"]},
        tenants={k: v for k, v in rules.tenants.items() if k in wanted["tenant"]},
        routes={k: v for k, v in rules.routes.items() if k in wanted["route"]},
        policies=tuple(p for p in rules.policies if policy_ref(p) in wanted["policy"]),
        calendars={k: v for k, v in rules.calendars.items() if k in wanted["tenant"]},
    )
    only = {
        "tiers": sorted(wanted["tier"]),
        "tenants": sorted(wanted["tenant"]),
        "routes": sorted(wanted["route"]),
    }
    docs = documents_of_rules(some, only=only)
    return {
        (subject, key): docs.of(subject).get(key)
        for subject in SUBJECTS
        for key in wanted[subject]
    }


def policy_row(key: str) -> models.Policy | None:
    """The policy row of a document key (``tier:free/search``, ``~`` for an override)."""
    override = key.endswith("~")
    scope, _, route = key.rstrip("~").partition("/")
    kind, _, subject = scope.partition(":")
    rows = models.Policy.objects.filter(
        scope=kind, expires_at__isnull=not override
    ).select_related("tier", "tenant", "route")
    if route == sluice_model.ALL_ROUTES:
        rows = rows.filter(route__isnull=True)
    else:
        rows = rows.filter(route__slug=route)
    if kind == sluice_model.ScopeKind.TIER:
        rows = rows.filter(tier__slug=subject)
    elif kind == sluice_model.ScopeKind.TENANT:
        rows = rows.filter(tenant__slug=subject)
    return rows.first()


def policy_reasons() -> dict[str, str]:
    """The reason of every policy of the rule tables, by document key."""
    rows = models.Policy.objects.values_list(
        "scope", "tier__slug", "tenant__slug", "route__slug", "expires_at", "reason"
    )
    return {
        _policy_key(scope, tier or tenant, route, expires): reason
        for scope, tier, tenant, route, expires, reason in rows
    }


def _policy_key(scope: str, subject: str | None, route: str | None, expires) -> str:
    """What ``Policy.scope_key``/``route_key`` make, from plain values (no instance)."""
    where = sluice_model.scope_key(scope, subject)
    return f"{where}/{route or sluice_model.ALL_ROUTES}{'~' if expires else ''}"


def _route_members(route: sluice_model.Route) -> Document:
    return {
        "methods": sorted(route.methods),
        "path": route.path,
        "cost": route.cost,
        "failure_mode": route.failure_mode.value,
        **_max_cost(route.max_cost),
    }


def _max_cost(value: int | None) -> Document:
    """A route's ``max_cost`` member: written only when set, so documents (and files)
    of routes that take no declared cost keep their shape."""
    return {} if value is None else {"max_cost": value}


# -- what gateways see ---------------------------------------------------------------


def rules_value(subject: str, doc: Mapping[str, Any] | None, key: str = "") -> Any:
    """The part of ``doc`` a snapshot carries (None for an absent object): two
    documents with equal values change nothing for gateways."""
    if doc is None:
        return None
    if subject == "tier":
        return doc["name"]
    if subject == "tenant":
        return _tenant_value(doc["tier"], tenant_calendar(doc))
    if subject == "route":
        return _route_value(key, doc).to_json()
    return policy_value(doc).to_json()


def value_in(
    rules: sluice_model.Rules,
    subject: str,
    key: str,
    *,
    policies: Mapping[str, sluice_model.Policy] | None = None,
) -> Any:
    """What ``rules`` hold for the object ``key`` of ``subject``, in :func:`rules_value`'s
    form (None when absent); ``policies``: ``rules``' policies by key, for a caller
    asking about many (a lookup instead of a pass over them all)."""
    if subject == "tier":
        return rules.tiers.get(key)
    if subject == "tenant":
        tier = rules.tenants.get(key)
        return None if tier is None else _tenant_value(tier, rules.calendar(key))
    if subject == "route":
        route = rules.routes.get(key)
        return route.to_json() if route else None
    if policies is not None:
        policy = policies.get(key)
    else:
        policy = next((p for p in rules.policies if policy_ref(p) == key), None)
    return policy.to_json() if policy else None


def _tenant_value(tier: str, calendar: sluice_model.Calendar) -> Any:
    """A tenant as gateways see it: its tier, with its calendar when it has one
    (the tier alone otherwise, as before calendars)."""
    members = calendar.to_json()
    return [tier, members] if members else tier


def _route_value(slug: str, doc: Mapping[str, Any]) -> sluice_model.Route:
    return sluice_model.Route(
        slug=slug,
        methods=tuple(sorted(doc["methods"])),
        path=doc["path"],
        cost=doc.get("cost", 1),
        failure_mode=sluice_model.FailureMode(doc.get("failure_mode", "open")),
        max_cost=doc.get("max_cost"),
    )


def rules_with(rules: sluice_model.Rules, edits: Iterable[Edit]) -> sluice_model.Rules:
    """``rules`` with each edit's ``after`` written in (or the object removed).

    Raises ValueError (or KeyError) for a document the snapshot cannot hold.
    """
    tiers, tenants = dict(rules.tiers), dict(rules.tenants)
    routes, calendars = dict(rules.routes), dict(rules.calendars)
    policies = {policy_ref(p): p for p in rules.policies}
    targets: dict[str, dict[str, Any]] = {
        "tier": tiers,
        "tenant": tenants,
        "route": routes,
        "policy": policies,
    }
    for edit in edits:
        target = targets[edit.subject]
        if edit.subject == "tenant":  # its calendar goes and comes with it
            calendars.pop(edit.key, None)
            if (
                edit.after is not None
                and (calendar := tenant_calendar(edit.after)).to_json()
            ):
                calendars[edit.key] = calendar
        if edit.after is None:
            target.pop(edit.key, None)
        elif edit.subject == "tier":
            target[edit.key] = edit.after["name"]
        elif edit.subject == "tenant":
            target[edit.key] = edit.after["tier"]
        elif edit.subject == "route":
            target[edit.key] = _route_value(edit.key, edit.after)
        else:
            target[edit.key] = policy_value(edit.after)
    return sluice_model.Rules(
        tiers=tiers,
        tenants=tenants,
        routes=routes,
        policies=tuple(policies.values()),
        documentation=rules.documentation,
        calendars=calendars,
        zones=zones_of(calendars.values()),
    )
