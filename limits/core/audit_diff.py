"""An audit entry's before and after as the fields that changed, for people to read.

Nested values are flattened into paths: a policy's limits read "limits 1, rate"
(joined by a right-pointing angle quote),
numbered in their stored order (a publish rewrites a policy's limit rows, so their
ids are not what identifies them to a reader and are left out).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

__all__ = ["FieldChange", "audit_changes"]

SEPARATOR = " \N{SINGLE RIGHT-POINTING ANGLE QUOTATION MARK} "
#: Keys of list members that only say which row held them.
_ROW_KEYS = ("id", "policy")


@dataclass(frozen=True, slots=True)
class FieldChange:
    """One field of an audit entry: its value before and after (None: absent)."""

    field: str
    before: str | None
    after: str | None


def audit_changes(before: Any, after: Any) -> list[FieldChange]:
    """The fields whose value differs between ``before`` and ``after``, in a stable
    order; every field when one side is absent (a creation or a deletion)."""
    old, new = _flatten(before), _flatten(after)
    fields = list(old) + [field for field in new if field not in old]
    return [
        FieldChange(field, old.get(field), new.get(field))
        for field in fields
        if old.get(field) != new.get(field) or before is None or after is None
    ]


def _flatten(value: Any, path: str = "") -> dict[str, str]:
    if isinstance(value, dict):
        flat: dict[str, str] = {}
        for key in sorted(value):
            flat.update(
                _flatten(value[key], f"{path}{SEPARATOR}{key}" if path else key)
            )
        return flat
    if isinstance(value, list) and any(isinstance(item, dict) for item in value):
        flat = {}
        for number, item in enumerate(value, start=1):
            member = (
                {k: v for k, v in item.items() if k not in _ROW_KEYS}
                if isinstance(item, dict)
                else item
            )
            flat.update(_flatten(member, f"{path} {number}"))
        return flat
    if value is None and not path:
        return {}
    return {path: _shown(value)}


def _shown(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return ", ".join(_shown(item) for item in value) or "(none)"
    return json.dumps(value)
