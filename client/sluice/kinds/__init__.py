"""Limit kinds: each rate-limiting algorithm behind one :class:`LimitKind`, found by
the type of a limit.

Pure: imports neither redis nor the runtime (``pyproject.toml``'s import
contracts), so the control plane reads, validates and compares limits with the
very code gateways enforce them with. ``docs/limit-kinds.md`` says how to add one.
"""

from __future__ import annotations

from typing import Any

from .base import Advertised, Direction, LimitKind, Shape
from .gcra import GCRA
from .quota import CALENDAR_QUOTA
from .sliding import SLIDING_WINDOW

__all__ = [
    "CALENDAR_QUOTA",
    "GCRA",
    "SLIDING_WINDOW",
    "Advertised",
    "Direction",
    "LimitKind",
    "Shape",
    "kind_of",
    "limit_order",
    "named",
    "register",
    "registered",
    "unregister",
]

#: limit value type -> its kind
_KINDS: dict[type[Any], LimitKind] = {}


def register(kind: LimitKind) -> LimitKind:
    """Make ``kind`` the kind of its ``limit_type``'s limits; return it.

    Raises ValueError when another kind already has that type or that name.
    """
    for known in _KINDS.values():
        if known is not kind and (
            known.limit_type is kind.limit_type or known.name == kind.name
        ):
            raise ValueError(f"kind {kind.name!r} clashes with kind {known.name!r}")
    _KINDS[kind.limit_type] = kind
    return kind


def unregister(kind: LimitKind) -> None:
    """Forget ``kind`` (a test's own kind, once the test is done)."""
    if _KINDS.get(kind.limit_type) is kind:
        del _KINDS[kind.limit_type]


def registered() -> tuple[LimitKind, ...]:
    """Every registered kind, in registration order."""
    return tuple(_KINDS.values())


def named(name: str) -> LimitKind | None:
    """The registered kind called ``name`` (a limit's ``kind`` member), or None."""
    for kind in _KINDS.values():
        if kind.name == name:
            return kind
    return None


def kind_of(limit: object) -> LimitKind:
    """The kind of ``limit``; KeyError when its type has none."""
    return _KINDS[type(limit)]


def limit_order(limit: Any) -> tuple[str, Any]:
    """Where ``limit`` goes in the canonical order of a policy's limits: by kind
    name, then by its own ``sort_key()``. Limits of one kind keep their order."""
    return (_KINDS[type(limit)].name, limit.sort_key())


register(GCRA)
register(SLIDING_WINDOW)
register(CALENDAR_QUOTA)
