"""Rules from a file, without the control plane: the rules-as-code YAML, or snapshot JSON.

* :func:`rules_from_file` reads ``rules.yaml`` (``docs/rules-as-code.md``, what
  ``manage.py rules export`` writes), a snapshot or a bundle (what the control
  plane serves, ``docs/gateway-protocol.md``) and returns a :class:`~.bundle.Bundle`
  any limiter takes.
* :class:`RulesFile` is a provider over such a file, re-read when it changes.

A YAML file is read by the parser the control plane uses (:mod:`.yamlread`), its
members are checked by the snapshot's own parser (:mod:`.parsing`) and the whole
set by :func:`~.validation.validate_rules`, the checks the control plane runs
before publishing: every problem comes back in one :class:`RulesFileError`, each
at its line (``rules.yaml:14: policies[3].limits[0].burst: must be at least 1``).
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path as FilePath
from typing import Any, TypeVar

from .bundle import Bundle, fallback_snapshot, parse_bundle, read_bundle_file
from .calendar import DEFAULT_ZONE, Calendar
from .errors import EnforcementError, SnapshotError
from .parsing import parse_concurrency, parse_limit, parse_policy, parse_route
from .quota import DEFAULT_TIMEOUT, ConcurrencyLimit, RateLimit
from .rules import Policy, Rules
from .signing import KeyRing
from .snapshot import Snapshot
from .validation import Problem, policy_ref, validate_rules
from .zonefiles import zone_rule

__all__ = [
    "PERIOD_NAMES",
    "RulesFile",
    "RulesFileError",
    "problem_member",
    "rules_from_file",
    "rules_from_yaml",
]

logger = logging.getLogger("sluice")

Path = tuple[str | int, ...]
_T = TypeVar("_T")

#: How files name the periods (seconds) of :data:`~.quota.PERIODS`.
PERIOD_NAMES = {1: "second", 60: "minute", 3600: "hour", 86400: "day"}
_PERIOD_SECONDS = {name: seconds for seconds, name in PERIOD_NAMES.items()}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SECTIONS = {"tier": "tiers", "tenant": "tenants", "route": "routes"}
#: per object: required members, optional ones (what only files and tables hold included)
_MEMBERS = {
    "tiers": ({"name"}, {"position", "description"}),
    "tenants": ({"name", "tier"}, {"contacts", "time_zone", "billing_day"}),
    "routes": (
        {"methods", "path"},
        {"cost", "failure_mode", "max_cost", "description"},
    ),
    "policies": ({"scope", "route", "limits"}, {"expires_at", "reason"}),
}


class RulesFileError(EnforcementError, ValueError):
    """A rules file that cannot be used; ``problems`` name the line and member of each."""

    def __init__(self, name: str, problems: Sequence[Any]) -> None:
        self.name = name
        #: :class:`~.yamlread.LineProblem` s, by line
        self.problems = sorted(problems, key=lambda p: (p.line, str(p.path)))
        super().__init__("\n".join(p.shown(name) for p in self.problems))


def rules_from_file(
    path: str | os.PathLike[str],
    *,
    version: int = 1,
    public_keys: KeyRing | None = None,
) -> Bundle:
    """The rules of the file at ``path``, as a bundle any limiter takes.

    ``.yaml`` / ``.yml``: the rules-as-code format, made snapshot ``version``
    (published at the epoch, so the same file always has the same hash): the
    operator's own file, never signed. Any other name: JSON, a snapshot or a
    bundle as the control plane serves them, or a signed bundle file (what a
    gateway caches, and ``manage.py gateway_bundle`` writes). With
    ``public_keys``, a JSON file must be a signed bundle file whose signature
    one of them verifies; without, only the snapshots' own hashes are checked.
    Raises :class:`RulesFileError` (YAML, every problem at its line) or
    :class:`~.errors.SnapshotError` (JSON, the first fault by its path).
    """
    file = FilePath(path)
    if file.suffix.lower() in (".yaml", ".yml"):
        text = file.read_bytes().decode("utf-8")
        rules = rules_from_yaml(text, name=str(path))
        return Bundle(_snapshot_of(rules, version))
    if public_keys is not None:
        return read_bundle_file(file, public_keys).bundle
    raw = file.read_bytes()
    head, newline, body = raw.partition(b"\n")
    if newline and b'"signature"' in head and body.strip():
        raw = body  # a signed bundle file read without keys: its bundle alone
    try:
        data = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SnapshotError("$", f"not valid JSON: {exc}") from None
    if isinstance(data, dict) and "active" in data:
        return parse_bundle(data)
    return Bundle(Snapshot.from_json(data))


def _snapshot_of(rules: Rules, version: int) -> Snapshot:
    return Snapshot.build(
        version=version,
        parent=None,
        published_at=_EPOCH,
        effective_at=_EPOCH,
        rules=rules,
    )


def rules_from_yaml(text: str, *, name: str = "rules.yaml") -> Rules:
    """The rules of a rules-as-code file's ``text``; RulesFileError lists every problem."""
    from .yamlread import yaml_read  # PyYAML: only who reads YAML needs it

    parsed = yaml_read(text)
    if parsed.problems:
        raise RulesFileError(name, parsed.problems)
    reader = _Reader(parsed)
    rules = reader.rules()
    if not reader.problems:
        for problem in validate_rules(rules):
            reader.problem(reader.located(problem), problem.message)
    if reader.problems:
        raise RulesFileError(name, reader.problems)
    return rules


def problem_member(
    problem: Problem, limits: Sequence[Mapping[str, Any]] | None
) -> Path:
    """The member of its document that a :func:`~.validation.validate_rules` problem
    names; ``limits``: a policy document's limits as written (rate limits and
    concurrency caps in one list), whose indices the path then uses."""
    if problem.kind != "policy":
        return (problem.field,) if problem.key != "*" else ()
    member, _, rest = problem.field.partition("[")
    if limits is None or member not in ("limits", "concurrency") or not rest:
        return (member,)
    index, _, tail = rest.partition("]")
    concurrent = member == "concurrency"
    rows = [i for i, lim in enumerate(limits) if ("max_inflight" in lim) == concurrent]
    return ("limits", rows[int(index)], *([tail.lstrip(".")] if tail else []))


class _Reader:
    """A parsed file made rules, noting each problem at its line."""

    def __init__(self, parsed: Any) -> None:
        self.parsed = parsed
        self.problems: list[Any] = []
        self.policies: dict[str, int] = {}  #: policy_ref -> index in the file

    def problem(self, path: Path, message: str) -> None:
        from .yamlread import LineProblem

        self.problems.append(LineProblem(self.parsed.line_of(path), path, message))

    def parsed_as(self, at: Path, parse: Callable[[str], _T]) -> _T | None:
        """``parse("@")``, with a SnapshotError noted at its member under ``at``."""
        try:
            return parse("@")
        except SnapshotError as exc:
            self.problem((*at, *_member_path(exc.path)), exc.message)
            return None

    def rules(self) -> Rules:
        data = self.parsed.data
        if not isinstance(data, dict):
            self.problem((), "a rules file is a mapping (format, tiers, ...)")
            return Rules({}, {}, {}, ())
        self.members((), data, {"format", *_MEMBERS}, set())
        if "format" in data and data["format"] != 1:
            self.problem(("format",), f"{data['format']!r}: this client reads format 1")
        tiers = {slug: doc["name"] for slug, doc in self.section(data, "tiers")}
        found = self.section(data, "tenants")
        tenants = {slug: doc["tier"] for slug, doc in found}
        calendars = {
            slug: calendar
            for slug, doc in found
            if (calendar := self.calendar(("tenants", slug), doc)) != Calendar()
        }
        routes = {
            slug: route
            for slug, doc in self.section(data, "routes")
            if (route := self.route(slug, doc)) is not None
        }
        policies = []
        for index, doc in self.items(data, "policies"):
            policy = self.policy(("policies", index), doc)
            if policy is not None:
                self.policies.setdefault(policy_ref(policy), index)
                policies.append(policy)
        return Rules(
            tiers,
            tenants,
            routes,
            tuple(policies),
            calendars=calendars,
            zones={
                zone: zone_rule(zone)
                for zone in sorted(
                    {c.zone for c in calendars.values()} - {DEFAULT_ZONE}
                )
            },
        )

    def calendar(self, at: Path, doc: dict[str, Any]) -> Calendar:
        """A tenant's calendar (UTC and day 1 unless it says), its zone one this
        machine's tzdata knows: the snapshot carries the zone's rule."""
        zone, day = doc.get("time_zone", DEFAULT_ZONE), doc.get("billing_day", 1)
        if not isinstance(zone, str) or not _known_zone(zone):
            self.problem((*at, "time_zone"), f"{zone!r} is not a known time zone")
            zone = DEFAULT_ZONE
        if isinstance(day, bool) or not isinstance(day, int) or not 1 <= day <= 31:
            self.problem((*at, "billing_day"), "must be a day of the month, 1 to 31")
            day = 1
        return Calendar(zone=zone, billing_day=day)

    def members(
        self, at: Path, doc: Any, required: set[str], optional: set[str]
    ) -> bool:
        """Whether ``doc`` is a mapping with the members it must and may have."""
        if not isinstance(doc, dict):
            self.problem(at, "must be a mapping")
            return False
        found = [f"missing member(s): {', '.join(sorted(required - doc.keys()))}"]
        found = found if required - doc.keys() else []
        unknown = doc.keys() - required - optional
        if unknown:
            found.append(f"unknown member(s): {', '.join(sorted(unknown))}")
        for message in found:
            self.problem(at, message)
        return not found

    def section(self, data: dict[str, Any], name: str) -> list[tuple[str, Any]]:
        section = data.get(name)
        if not isinstance(section, dict):
            if name in data:
                self.problem((name,), "must be a mapping of slugs")
            return []
        required, optional = _MEMBERS[name]
        return [
            (slug, doc)
            for slug, doc in section.items()
            if self.members((name, slug), doc, required, optional)
            and self.strings((name, slug), doc, ("name", "tier"))
        ]

    def strings(self, at: Path, doc: dict[str, Any], names: Sequence[str]) -> bool:
        bad = [
            n for n in names if n in doc and not (isinstance(doc[n], str) and doc[n])
        ]
        for member in bad:
            self.problem((*at, member), "must be a non-empty string")
        return not bad

    def items(self, data: dict[str, Any], name: str) -> list[tuple[int, Any]]:
        items = data.get(name)
        if not isinstance(items, list):
            if name in data:
                self.problem((name,), "must be a list")
            return []
        return list(enumerate(items))

    def route(self, slug: str, doc: dict[str, Any]) -> Any:
        fields = {
            "methods": doc["methods"],
            "path": doc["path"],
            "cost": doc.get("cost", 1),
            "failure_mode": doc.get("failure_mode", "open"),
        }
        if "max_cost" in doc:
            fields["max_cost"] = doc["max_cost"]
        return self.parsed_as(("routes", slug), lambda p: parse_route(slug, fields, p))

    def policy(self, at: Path, doc: Any) -> Policy | None:
        required, optional = _MEMBERS["policies"]
        if not self.members(at, doc, required, optional):
            return None
        fields = {**doc, "expires_at": doc.get("expires_at"), "limits": []}
        fields.pop("reason", None)
        policy = self.parsed_as(at, lambda p: parse_policy(fields, p))
        if not isinstance(doc["limits"], list):
            self.problem((*at, "limits"), "must be a list")
            return None
        values = [
            self.limit((*at, "limits", index), limit)
            for index, limit in enumerate(doc["limits"])
        ]
        if policy is None or None in values:
            return None
        if policy.expires_at is not None:
            self.override(at, policy, doc)
        return replace(
            policy,
            limits=tuple(
                v
                for v in values
                if v is not None and not isinstance(v, ConcurrencyLimit)
            ),
            concurrency=tuple(v for v in values if isinstance(v, ConcurrencyLimit)),
        )

    def override(self, at: Path, policy: Policy, doc: dict[str, Any]) -> None:
        """What the control plane asks of a temporary override (limits.rules.checks)."""
        if not policy.scope.startswith("tenant:"):
            self.problem((*at, "expires_at"), "Only tenant policies can expire.")
        reason = doc.get("reason")
        if not isinstance(reason, str) or not reason.strip():
            self.problem((*at, "reason"), "A temporary override needs a reason.")

    def limit(self, at: Path, doc: Any) -> RateLimit | ConcurrencyLimit | None:
        if not isinstance(doc, dict):
            self.problem(at, "must be a mapping")
            return None
        if "max_inflight" in doc:
            cap = {"timeout": DEFAULT_TIMEOUT, "shadow": False, **doc}
            return self.parsed_as(at, lambda p: parse_concurrency(cap, p))
        if doc.get("kind") == "calendar_quota":  # its ``per`` is a word already
            quota = {"cost": None, "shadow": False, **doc}
            return self.parsed_as(at, lambda p: parse_limit(quota, p))
        # Files name periods ("minute"); a sliding window's is its ``window``.
        member = "window" if doc.get("kind") == "sliding_window" else "period"
        period = doc.get(member)
        if isinstance(period, str):
            if period not in _PERIOD_SECONDS:
                names = ", ".join(_PERIOD_SECONDS)
                self.problem((*at, member), f"{period!r} is not one of: {names}")
                return None
            period = _PERIOD_SECONDS[period]
        limit = {"cost": None, "shadow": False, **doc, member: period}
        return self.parsed_as(at, lambda p: parse_limit(limit, p))

    def located(self, problem: Problem) -> Path:
        """Where in the file a :func:`~.validation.validate_rules` problem is."""
        if problem.kind != "policy":
            section = _SECTIONS.get(problem.kind, problem.kind)
            return (section, problem.key, *problem_member(problem, None))
        index = self.policies.get(problem.key)
        if index is None:
            return ("policies",)
        limits = self.parsed.data["policies"][index]["limits"]
        return ("policies", index, *problem_member(problem, limits))


def _known_zone(name: str) -> bool:
    try:
        zone_rule(name)
    except LookupError:
        return False
    return True


def _member_path(path: str) -> Path:
    """``@.limits[0].burst`` (a parser's path under the ``@`` prefix) as a path."""
    parts: list[str | int] = []
    for part in path.removeprefix("@").split("."):
        name, *indices = part.replace("]", "").split("[")
        if name:
            parts.append(name)
        parts += [int(index) for index in indices if index.isdigit()]
    return tuple(parts)


class RulesFile:
    """A provider over a rules file (:func:`rules_from_file`), re-read when it changes.

    The file is looked at (``stat``) at most every ``check_every`` seconds of
    ``clock``, on a limiter's call. A file that cannot be read or is invalid
    keeps the rules in force and logs ``rules_file.ignored`` with every
    problem. The first read raises instead, unless ``strict`` is False: then
    the built-in strict rules (:func:`~.bundle.fallback_snapshot`) apply until
    a good file appears, as for a gateway that has no snapshot yet.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        check_every: float = 1.0,
        strict: bool = True,
        public_keys: KeyRing | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.path = FilePath(path)
        self.public_keys = public_keys
        self.check_every = check_every
        self.bundle = Bundle(fallback_snapshot())
        self._clock, self._wall = clock, wall
        self._stamp: tuple[float, int] | None = None
        self._next_check = clock() + check_every
        if strict:
            self._load()
        else:
            self._reload()

    def current(self, now: float | None = None) -> Snapshot:
        """The snapshot in force at ``now`` (the limiter's clock for the rules;
        default: ``wall``)."""
        checked = self._clock()
        if checked >= self._next_check:
            self._next_check = checked + self.check_every
            self._reload()
        return self.bundle.in_force(self._wall() if now is None else now)

    def upcoming(self, now: float | None = None) -> Snapshot | None:
        """The next scheduled snapshot, rehearsed beside the one in force (:mod:`.rehearsal`)."""
        return self.bundle.upcoming(self._wall() if now is None else now)

    def start(self) -> RulesFile:
        """Nothing to start (the file is looked at on calls); for :class:`~.source.SnapshotSource`'s shape."""
        return self

    def stop(self) -> None:
        """Nothing to stop."""

    def _load(self) -> None:
        status = self.path.stat()
        stamp = (status.st_mtime, status.st_size)
        if stamp != self._stamp:
            self.bundle = rules_from_file(self.path, public_keys=self.public_keys)
            self._stamp = stamp
            logger.info("rules_file.applied: %s", self.path)

    def _reload(self) -> None:
        try:
            self._load()
        except (OSError, UnicodeDecodeError, EnforcementError) as exc:
            logger.warning("rules_file.ignored: %s: %s", self.path, exc)
