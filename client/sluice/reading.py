"""Readers of snapshot JSON: each checks one member and raises a
:class:`~.errors.SnapshotError` that names its path in the document.

Shared by :mod:`.parsing` (the rule set) and the limit kinds (each parses its
own limits, :meth:`.kinds.LimitKind.parse`), so a new kind reads its members
without editing the parser. Pure: the standard library and the errors only.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import Enum
from typing import Any, TypeVar

from .errors import SnapshotError
from .quota import MAX_PUBLIC_DESCRIPTION, MAX_PUBLIC_NAME, PERIODS

__all__ = [
    "array",
    "boolean",
    "choice",
    "cost",
    "integer",
    "mapping",
    "members",
    "moment",
    "period",
    "public",
    "string",
    "text",
]

#: the members of a limit's public name and description (optional everywhere)
PUBLIC = frozenset({"name", "description"})

_E = TypeVar("_E", bound=Enum)


def members(
    data: Any,
    path: str,
    keys: set[str],
    optional: frozenset[str] | set[str] = frozenset(),
) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise SnapshotError(path, "must be an object")
    missing = keys - data.keys()
    if missing:
        raise SnapshotError(path, f"missing member(s): {', '.join(sorted(missing))}")
    unknown = data.keys() - keys - optional
    if unknown:
        raise SnapshotError(path, f"unknown member(s): {', '.join(sorted(unknown))}")
    return data


def mapping(data: Any, path: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise SnapshotError(path, "must be an object")
    return data


def array(data: Any, path: str) -> list[Any]:
    if not isinstance(data, list):
        raise SnapshotError(path, "must be an array")
    return data


def string(data: Any, path: str) -> str:
    if not isinstance(data, str) or not data:
        raise SnapshotError(path, "must be a non-empty string")
    return data


def boolean(data: Any, path: str) -> bool:
    if not isinstance(data, bool):
        raise SnapshotError(path, "must be true or false")
    return data


def integer(data: Any, path: str, *, minimum: int) -> int:
    if isinstance(data, bool) or not isinstance(data, int):
        raise SnapshotError(path, "must be an integer")
    if data < minimum:
        raise SnapshotError(path, f"must be at least {minimum}")
    return data


def cost(obj: dict[str, Any], path: str) -> int | None:
    """A limit's own ``cost`` member: None (the route's cost) or at least 1."""
    given = obj["cost"]
    return None if given is None else integer(given, f"{path}.cost", minimum=1)


def text(data: Any, path: str, most: int) -> str:
    text = string(data, path)
    if len(text) > most:
        raise SnapshotError(path, f"at most {most} characters")
    return text


def moment(data: Any, path: str) -> datetime:
    text = string(data, path)
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise SnapshotError(path, f"not an ISO 8601 time: {text!r}") from None
    if moment.tzinfo is None:
        raise SnapshotError(path, "must carry a time zone (UTC, 'Z')")
    return moment.astimezone(UTC)


def choice(kind: type[_E], data: Any, path: str) -> _E:
    try:
        return kind(data)
    except ValueError:
        allowed = ", ".join(member.value for member in kind)
        raise SnapshotError(path, f"{data!r} is not one of: {allowed}") from None


def period(data: Any, path: str) -> int:
    """A limit's period in seconds, one of ``PERIODS``."""
    seconds = integer(data, path, minimum=1)
    if seconds not in PERIODS:
        raise SnapshotError(path, f"must be one of {sorted(PERIODS)} seconds")
    return seconds


def public(obj: dict[str, Any], path: str) -> dict[str, str]:
    """A limit's optional public name and description (absent: derived when shown)."""
    bounds = {"name": MAX_PUBLIC_NAME, "description": MAX_PUBLIC_DESCRIPTION}
    return {
        member: text(obj[member], f"{path}.{member}", most)
        for member, most in bounds.items()
        if member in obj
    }
