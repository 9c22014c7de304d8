"""Rules as code: export the active rules as a file, diff a file against them, apply one.

* :func:`rules_export` writes the active version, with what snapshots do not
  carry (names, contacts, descriptions, reasons) from the rule tables, as YAML
  (``limits.ascode.yamlfile``): byte-stable, so exporting the same rules gives
  the same bytes.
* :func:`rules_file_read` reads a file and refuses it with every problem at its
  line: YAML syntax, the schema (``docs/rules.schema.json``), each document,
  then the rule set it makes (the checks gateways run).
* :func:`rules_file_diff` compares a file with the active version: the changes
  in words and the tenants they reach.
* :func:`rules_file_apply` opens a change request of those changes through the
  same services as the admin and the API, and publishes it on request.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.db import transaction

from limits.ascode.yamlfile import YamlData, rules_yaml_write, yaml_read
from limits.changes.publishing import (
    KnownDiff,
    Published,
    change_request_publish,
    conflicts_with,
)
from limits.changes.services import (
    EditsInvalid,
    Proposal,
    active_base,
    change_request_open,
    edits_known,
)
from limits.core.audit import Actor
from limits.core.collector import collector_paused
from limits.diff.diffing import EMPTY_RULES, RulesDiff, rules_diff
from limits.models import ChangeOrigin, ChangeRequest
from limits.rules.checks import document_problems, rules_problems
from limits.rules.documents import (
    Document,
    Edit,
    RuleDocuments,
    document_key,
    document_normalize,
    documents_of_rules,
    rules_with,
)
from limits.rules.schema import schema_errors
from limits.versions.selectors import (
    snapshot_get_active,
    snapshot_rules,
    snapshot_scheduled,
)
from sluice.yamlread import LineProblem, dotted

__all__ = [
    "SHOWN",
    "Applied",
    "FileDiff",
    "FileProblem",
    "Pending",
    "RulesFile",
    "RulesFileInvalid",
    "rules_export",
    "rules_export_write",
    "rules_file_apply",
    "rules_file_diff",
    "rules_file_read",
]

Path = tuple[str | int, ...]
#: Changes a diff in words shows by default; the counts per kind cover them all.
SHOWN = 50
_SECTIONS = {"tier": "tiers", "tenant": "tenants", "route": "routes"}


#: One problem of a rules file, at its line (the client's, so both sides say the same).
FileProblem = LineProblem


class RulesFileInvalid(ValidationError):
    """The file cannot be used; ``problems`` name the line and member of each."""

    def __init__(self, name: str, problems: list[FileProblem]) -> None:
        self.name = name
        self.problems = sorted(problems, key=lambda p: (p.line, dotted(p.path)))
        super().__init__(
            [problem.shown(name) for problem in self.problems], code="invalid_file"
        )


@dataclass
class RulesFile:
    """A rules file read and checked: its documents as written (``raw``) and in
    canonical form, and where each one is in the file."""

    name: str
    documents: RuleDocuments
    raw: dict[tuple[str, str], Document]
    paths: dict[tuple[str, str], Path]
    parsed: YamlData

    def release(self) -> None:
        """Drop the file as written (its data, its text and ``raw``) once a change
        request holds its edits: at 100,000 tenants, a copy of the rules that
        publishing does not need. The documents stay; problems still get the
        lines of the file's sections and objects."""
        self.raw = {}
        self.parsed.data = None
        self.parsed.text = None

    def problem(self, subject: str, key: str, path: Path, message: str) -> FileProblem:
        full = (*self.paths.get((subject, key), ()), *path)
        return FileProblem(self.parsed.line_of(full), full, message)


def rules_export() -> str:
    """The active version as a rules file; ValidationError before the first publish."""
    out = io.StringIO()
    rules_export_write(out.write)
    return out.getvalue()


@collector_paused()
def rules_export_write(write: Callable[[str], Any]) -> None:
    """:func:`rules_export`, written piece by piece to ``write`` (a file, a response)."""
    row = snapshot_get_active(light=True)  # not its stored diff: 10 MB of JSON
    if row is None:
        raise ValidationError(
            "Nothing is published yet: publish a first version (manage.py publish)."
        )
    rules_yaml_write(documents_of_rules(snapshot_rules(row)), write)


@collector_paused()
def rules_file_read(text: str, *, name: str = "rules.yaml") -> RulesFile:
    """Read and check a rules file; RulesFileInvalid with every problem at its line."""
    parsed = yaml_read(text)
    if parsed.problems:
        raise RulesFileInvalid(name, parsed.problems)
    found = [
        FileProblem(parsed.line_of(path), path, message)
        for path, message in schema_errors(parsed.data)
    ]
    if found:
        raise RulesFileInvalid(name, found)
    rules_file = _documents(parsed, name)
    found = _document_problems(rules_file) or _set_problems(rules_file)
    if found:
        raise RulesFileInvalid(name, found)
    return rules_file


def _documents(parsed: YamlData, name: str) -> RulesFile:
    data: dict[str, Any] = parsed.data
    rules_file = RulesFile(name, RuleDocuments(), {}, {}, parsed)
    duplicates = []
    for subject, section in _SECTIONS.items():
        for slug, doc in data[section].items():
            rules_file.raw[(subject, slug)] = doc
            rules_file.paths[(subject, slug)] = (section, slug)
    for index, doc in enumerate(data["policies"]):
        key = document_key("policy", doc)
        if ("policy", key) in rules_file.paths:
            first = rules_file.paths[("policy", key)]
            said = f"the same policy as {dotted(first)} (line {parsed.line_of(first)})"
            duplicates.append(
                FileProblem(
                    parsed.line_of(("policies", index)), ("policies", index), said
                )
            )
        rules_file.raw[("policy", key)] = doc
        rules_file.paths[("policy", key)] = ("policies", index)
    if duplicates:
        raise RulesFileInvalid(name, duplicates)
    return rules_file


def _document_problems(rules_file: RulesFile) -> list[FileProblem]:
    found = []
    for (subject, key), doc in rules_file.raw.items():
        # the whole file matched the schema: not each document again
        for problem in document_problems(subject, key, doc, expiry=False, schema=False):
            found.append(
                rules_file.problem(subject, key, problem.path, problem.message)
            )
    if not found:
        for (subject, key), doc in rules_file.raw.items():
            rules_file.documents.of(subject)[key] = document_normalize(subject, doc)
    return found


def _set_problems(rules_file: RulesFile) -> list[FileProblem]:
    edits = [Edit(s, k, None, doc) for (s, k), doc in rules_file.raw.items()]
    policies = {k: doc for (s, k), doc in rules_file.raw.items() if s == "policy"}
    return [
        rules_file.problem(p.subject, p.key, p.path, p.message)
        for p in rules_problems(rules_with(EMPTY_RULES, edits), policies)
    ]


@dataclass(frozen=True)
class Pending:
    """A version scheduled to take effect later, and what the file's edits would
    conflict with in it (publishing the file carries its edits into that version,
    which it refuses where the version changes the same objects)."""

    version: int
    effective_at: datetime
    message: str
    conflicts: tuple[str, ...]  #: in words; empty: the file can be applied now

    def text(self) -> str:
        when = f"{self.effective_at:%Y-%m-%d %H:%M} UTC"
        head = f"Version {self.version} is scheduled for {when} ({self.message})"
        if not self.conflicts:
            return f"{head}: the file changes none of what it changes."
        return f"{head}; the file conflicts with it:\n" + "\n".join(
            f"  conflict {c}" for c in self.conflicts
        )


@dataclass(frozen=True)
class FileDiff:
    """A rules file against the active version: every object that differs (``edits``,
    including what only the rule tables hold), the rules' diff in words, and the
    versions scheduled to take effect later (``pending``)."""

    version: int | None
    diff: RulesDiff
    edits: list[Edit]
    pending: tuple[Pending, ...] = ()
    #: the rules digests of the active version and of the file (what gateways would
    #: get): equal on two installations with the same rules, unlike snapshot hashes
    active_digest: str | None = None
    file_digest: str | None = None

    @property
    def equal(self) -> bool:
        return not self.edits

    def lines(self) -> Iterator[tuple[str, str]]:
        """(kind, words) of every change, then of every object changed only in
        what gateways do not see (a name, a reason); a change's line is followed by
        whom it reaches (kind "reaches")."""
        told = set()
        for change in self.diff.changes:
            told.add((change.subject, change.key))
            yield change.kind.value, change.text
            yield "reaches", _reach(change.affected)
        for edit in self.edits:
            if (edit.subject, edit.key) not in told:
                yield "changed", f"{edit.subject} {edit.key}: {_metadata(edit)}"

    def counts(self) -> dict[str, int]:
        """How many objects change, per kind of change: ``{"new": 30, ...}``."""
        counts: dict[str, int] = {}
        for kind, _ in self.lines():
            if kind != "reaches":
                counts[kind] = counts.get(kind, 0) + 1
        return counts

    def text(self, *, limit: int | None = SHOWN) -> str:
        """The changes in words, each with whom it reaches, then the tenants reached;
        past ``limit`` changes (None: no limit), counts per kind and the first ones."""
        against = f"version {self.version} (active)" if self.version else "no version"
        later = "".join(f"{p.text()}\n" for p in self.pending)
        if self.equal:
            return f"The file matches {against}.\n{later}"
        counts = self.counts()
        said = ", ".join(f"{n:,} {kind}" for kind, n in sorted(counts.items()))
        lines = [
            f"The file differs from {against}: {len(self.edits):,} object(s) change "
            f"({said})."
        ]
        shown = 0
        for kind, words in self.lines():
            if kind != "reaches":
                shown += 1
            if limit is not None and shown > limit:
                lines.append(
                    f"  ... and {sum(counts.values()) - limit:,} more: the first "
                    f"{limit} are shown (rules diff --full shows all of them)."
                )
                break
            lines.append(
                f"           reaches: {words}"
                if kind == "reaches"
                else f"  {kind:<8} {words}"
            )
        tenants = self.diff.affected_tenants
        listed = ", ".join(tenants[:50]) + (
            f" and {len(tenants) - 50:,} more" if len(tenants) > 50 else ""
        )
        lines.append(f"Tenants reached ({len(tenants):,}): {listed or 'none'}.")
        if self.diff.lowers:
            lines.append(
                "Some client gets less than before: the notice period applies."
            )
        return "\n".join(lines) + "\n" + later

    def to_json(self) -> dict:
        return {
            "equal": self.equal,
            "version": self.version,
            "objects": [
                {
                    "object": e.subject,
                    "key": e.key,
                    "before": e.before,
                    "after": e.after,
                }
                for e in self.edits
            ],
            "changes": self.diff.to_json(),
            "counts": self.counts(),
            "active_digest": self.active_digest,
            "file_digest": self.file_digest,
            "pending": [
                {
                    "version": p.version,
                    "effective_at": p.effective_at.isoformat(),
                    "message": p.message,
                    "conflicts": list(p.conflicts),
                }
                for p in self.pending
            ],
            "text": self.text(),
        }


def _reach(affected) -> str:
    parts = []
    if affected.tiers:
        tiers = ", ".join(affected.tiers)
        parts.append(f"tier{'s' if len(affected.tiers) > 1 else ''} {tiers}")
        if affected.except_tenants:
            parts[-1] += (
                f" (except {', '.join(affected.except_tenants[:20])}: own policy)"
            )
    if affected.tenants:
        parts.append(
            f"tenant{'s' if len(affected.tenants) > 1 else ''} {', '.join(affected.tenants)}"
        )
    if affected.anonymous:
        parts.append("anonymous traffic")
    return "; ".join(parts) or "no one's limits"


def _metadata(edit: Edit) -> str:
    if edit.before is None or edit.after is None:
        return "added" if edit.before is None else "removed"
    moved = [
        f"{member} {edit.before.get(member)!r} → {edit.after.get(member)!r}"
        for member in sorted(edit.after.keys() | edit.before.keys())
        if edit.before.get(member) != edit.after.get(member)
    ]
    return "; ".join(moved)


@collector_paused()
def rules_file_diff(rules_file: RulesFile) -> FileDiff:
    """What applying ``rules_file`` would change in the active version."""
    row, base = active_base()
    edits = documents_of_rules(base).edits_to(rules_file.documents)
    rules = rules_with(base, edits)
    diff = rules_diff(base, rules)
    active = row.rules_digest if row else None
    return FileDiff(
        row.version if row else None,
        diff,
        edits,
        _pending(edits),
        active_digest=active,
        file_digest=active if row and not diff else rules.digest(),
    )


def _pending(edits: list[Edit]) -> tuple[Pending, ...]:
    """Each scheduled version, with the file's edits it would conflict with."""
    return tuple(
        Pending(
            row.version,
            row.effective_at,
            row.message,
            tuple(c.text for c in conflicts_with(snapshot_rules(row), edits, row)),
        )
        for row in snapshot_scheduled().defer("content_gzip", "diff")
    )


@dataclass(frozen=True)
class Applied:
    """What applying a file did: the request it opened (None: nothing differed),
    the version it published, or why it was not published."""

    diff: FileDiff
    change_request: ChangeRequest | None = None
    published: Published | None = None
    not_published: str = ""


@collector_paused()
@transaction.atomic
def rules_file_apply(
    rules_file: RulesFile,
    *,
    actor: Actor,
    title: str = "",
    reason: str = "",
    publish: bool = False,
    effective_at: datetime | None = None,
    note: str = "",
    emergency_reason: str = "",
) -> Applied:
    """Open a change request of what ``rules_file`` changes; with ``publish``, publish
    it. The request stays open when publishing is refused (approval, notice), with
    the reason in ``not_published``. One transaction: an apply interrupted (killed,
    a lost connection) leaves nothing, not even the request."""
    found = rules_file_diff(rules_file)
    if found.equal:
        return Applied(found)
    proposals = [
        Proposal(
            e.subject,
            e.key,
            None if e.after is None else rules_file.raw[(e.subject, e.key)],
        )
        for e in found.edits
    ]
    try:
        request = change_request_open(
            actor=actor,
            proposals=proposals,
            title=title or f"Apply {rules_file.name}",
            reason=reason,
            origin=ChangeOrigin.FILE,
            diff=(found.version, found.diff),
        )
    except EditsInvalid as exc:
        raise RulesFileInvalid(
            rules_file.name,
            [
                rules_file.problem(p.subject, p.key, p.path, p.message)
                for _, p in exc.problems
            ],
        ) from None
    del proposals
    rules_file.release()
    if not publish:
        return Applied(found, request)
    # the request again without its summary, the diff's JSON, so that publishing
    # does not hold it while it builds the version's own (memory at 100,000 tenants)
    opened, request = request, ChangeRequest.objects.defer("summary").get(pk=request.pk)
    edits_known(request, seen=opened)  # and with the edits it wrote, not read back
    del opened
    try:
        published = change_request_publish(
            change_request=request,
            actor=actor,
            effective_at=effective_at,
            note=note,
            emergency_reason=emergency_reason,
            # the version's stored diff is the file's: not computed a second time
            known_diff=KnownDiff(found.version, found.file_digest or "", found.diff),
        )
    except ValidationError as exc:
        return Applied(found, request, not_published=" ".join(exc.messages))
    return Applied(found, published.change_request, published)
