"""Checks of rule documents: one document at a time, then the rule set they make.

Every problem names its object and the member at fault inside the document
(:class:`DocumentProblem`), so a rules file can point at a line and the API at a
field. The checks reuse what the rule tables check: the JSON Schema of
``limits.rules.schema``, the models' own validators (slugs, path patterns,
e-mail addresses, override expiry) and, for the whole set, ``validate_rules``,
which gateways run too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.core.validators import EmailValidator

from limits.core.zones import validate_time_zone
from limits.models import override_expiry_error
from limits.models.rules import (
    route_slug_validator,
    slug_validator,
    validate_path_pattern,
)
from limits.rules.documents import Document, document_key, parse_time
from limits.rules.schema import schema_errors
from sluice import model as sluice_model
from sluice.model import Problem, validate_rules
from sluice.rulesfile import problem_member

__all__ = ["DocumentProblem", "document_problems", "rules_problems"]

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class DocumentProblem:
    """What is wrong with one document: ``path`` is the member inside it (empty: the
    document as a whole)."""

    subject: str
    key: str
    path: Path
    message: str

    @property
    def where(self) -> str:
        """``limits[1].burst``: the member, the way people read paths."""
        return _dotted(self.path)

    def __str__(self) -> str:
        said = f"{self.subject} {self.key}"
        return (
            f"{said}, {self.where}: {self.message}"
            if self.path
            else f"{said}: {self.message}"
        )


def _dotted(path: Path) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text


def document_problems(
    subject: str,
    key: str,
    doc: Mapping[str, Any],
    *,
    now: datetime | None = None,
    expiry: bool = True,
    schema: bool = True,
) -> list[DocumentProblem]:
    """Problems of one document on its own; with ``expiry``, an override's expiry is
    checked as if it were being set now (in the future, within the maximum).
    Without ``schema``, the document is known to match its schema (a file checked
    whole against the same definitions)."""
    problems = [
        DocumentProblem(subject, key, path, message)
        for path, message in (schema_errors(doc, definition=subject) if schema else ())
    ]
    if problems:  # members are not what they should be: nothing more to check
        return problems
    found = {
        "tier": _tier,
        "tenant": _tenant,
        "route": _route,
        "policy": _policy,
    }[subject](key, doc, now=now, expiry=expiry)
    return [DocumentProblem(subject, key, path, message) for path, message in found]


def _validated(validator, value, path: Path) -> list[tuple[Path, str]]:
    try:
        validator(value)
    except ValidationError as exc:
        return [(path, message) for message in exc.messages]
    return []


def _tier(key: str, doc: Document, **_: Any) -> list[tuple[Path, str]]:
    return _validated(slug_validator, key, ())


def _tenant(key: str, doc: Document, **_: Any) -> list[tuple[Path, str]]:
    found = _validated(slug_validator, key, ())
    email = EmailValidator("Not a valid e-mail address.")
    for index, address in enumerate(doc.get("contacts", [])):
        found += _validated(email, address, ("contacts", index))
    if "time_zone" in doc:
        found += _validated(validate_time_zone, doc["time_zone"], ("time_zone",))
    return found


def _route(key: str, doc: Document, **_: Any) -> list[tuple[Path, str]]:
    found = _validated(route_slug_validator, key, ())
    return found + _validated(validate_path_pattern, doc["path"], ("path",))


def _policy(
    key: str, doc: Document, *, now: datetime | None, expiry: bool
) -> list[tuple[Path, str]]:
    expires = doc.get("expires_at")
    if expires is None:
        return _key_matches(key, doc)
    try:
        moment = parse_time(expires)
    except ValueError:
        return [(("expires_at",), f"not an ISO 8601 time with a zone: {expires!r}")]
    found = _key_matches(key, doc)
    if not doc["scope"].startswith("tenant:"):
        found.append((("expires_at",), "Only tenant policies can expire."))
    if not doc.get("reason", "").strip():
        found.append((("reason",), "A temporary override needs a reason."))
    problem = override_expiry_error(moment, now=now) if expiry else None
    return found + ([(("expires_at",), problem)] if problem else [])


def _key_matches(key: str, doc: Document) -> list[tuple[Path, str]]:
    if key and key != document_key("policy", doc):
        said = document_key("policy", doc)
        return [((), f"the key {key!r} does not match the policy it holds ({said!r})")]
    return []


def rules_problems(
    rules: sluice_model.Rules, policies: Mapping[str, Document]
) -> list[DocumentProblem]:
    """Problems of the whole rule set, each on the document it comes from;
    ``policies`` are the policy documents by key (limits in the order they were
    written: compiled indices are turned back into theirs)."""
    return [_located(problem, policies) for problem in validate_rules(rules)]


def _located(problem: Problem, policies: Mapping[str, Document]) -> DocumentProblem:
    doc = policies.get(problem.key) if problem.kind == "policy" else None
    path = problem_member(problem, doc["limits"] if doc is not None else None)
    return DocumentProblem(problem.kind, problem.key, path, problem.message)
