"""Canonical JSON: the one serialization of snapshot documents (see :mod:`.snapshot`)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["canonical_json"]


def canonical_json(value: Any) -> bytes:
    """Serialize ``value`` to canonical bytes; refuse floats, whose text is not portable."""
    _check_no_floats(value)
    text = json.dumps(
        value,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        default=_refuse,
    )
    return text.encode("utf-8")


def _check_no_floats(value: Any) -> None:
    if isinstance(value, float):
        raise TypeError("canonical JSON carries integers only, not floats")
    if isinstance(value, dict):
        for item in value.values():
            _check_no_floats(item)
    elif isinstance(value, list | tuple):
        for item in value:
            _check_no_floats(item)


def _refuse(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not part of the snapshot format")
