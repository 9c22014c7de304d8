"""Snapshot format v1: the one document the control plane publishes and gateways enforce.

The control plane compiles its rule tables into a :class:`~.rules.Rules` value and
wraps it in a :class:`Snapshot` (version, parent, times, hash). Gateways parse the
same bytes with :meth:`Snapshot.from_bytes`. Nothing else defines the shape: the
JSON Schema in ``docs/snapshot.schema.json`` is checked against this module's
output by the test suite. The rule value types live in :mod:`.rules` and are
re-exported here, so ``sluice.snapshot`` names the whole format.

Canonical bytes: UTF-8 JSON with sorted keys, no insignificant whitespace, and
no floats (every number is an integer), so that equal rules give equal bytes on
every machine. ``hash`` is the SHA-256 of the canonical document without its
``hash`` member; it is the HTTP ETag of the snapshot.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .canonical import canonical_json
from .errors import SnapshotError
from .parsing import parse_rules, parse_snapshot_fields
from .rules import (
    ALL_ROUTES,
    DEFAULT_SCOPE,
    PERIODS,
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
    format_time,
    scope_key,
    whole_seconds,
)

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
    "parse_rules",
    "scope_key",
]

FORMAT_VERSION = 1


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
        published_at = whole_seconds(published_at)
        effective_at = whole_seconds(effective_at)
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
        return cls(**parse_snapshot_fields(data, format_version=FORMAT_VERSION))

    @classmethod
    def from_bytes(cls, raw: bytes, *, canonical: bool = False) -> Snapshot:
        """Parse, validate and verify a document's bytes; raise SnapshotError if bad.

        ``canonical``: the bytes are ``to_bytes``'s of a validated snapshot (a
        store of published versions). The hash is then checked on the bytes with
        the hash taken out, and rules it covers are not validated again; bytes
        that are not canonical fail that check and are verified in full instead.
        """
        try:
            data = json.loads(raw)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SnapshotError("$", f"not valid JSON: {exc}") from None
        claimed = data.get("hash") if canonical and isinstance(data, dict) else None
        if isinstance(claimed, str):
            member = b'"hash":' + json.dumps(claimed).encode() + b","
            hashed = raw.replace(member, b"", 1)
            if hashlib.sha256(hashed).hexdigest() == claimed:
                fields = parse_snapshot_fields(
                    data, format_version=FORMAT_VERSION, hashed=hashed
                )
                return cls(**fields)
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
        "published_at": format_time(published_at),
        "effective_at": format_time(effective_at),
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
        "published_at": format_time(published_at),
        "effective_at": format_time(effective_at),
    }
    if digest is not None:
        head["hash"] = digest
    tail = canonical_json({"version": version})[1:]  # b'"version":N}'
    return b"".join(
        [canonical_json(head)[:-1], b',"rules":', rules.canonical_bytes(), b",", tail]
    )
