"""Canonical JSON: the one serialization of snapshot documents (see :mod:`.snapshot`)."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["canonical_json"]


def canonical_json(value: Any) -> bytes:
    """Serialize ``value`` to canonical bytes; refuse floats, whose text is not portable.

    The float check scans the encoded text instead of walking the value in
    Python (~0.3 s on a 100,000-tenant document, ``docs/benchmarks.md``): the
    text has no whitespace, so a float literal is a number that follows ``:``,
    ``,`` or ``[`` and goes on with ``.``, ``e`` or ``E``. Only when such a
    sequence appears (it may be inside a string) is the text parsed back to
    tell for sure.
    """
    text = json.dumps(
        value,
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
        allow_nan=False,
        default=_refuse,
    )
    if _FLOAT_HINT.search(text):
        json.loads(text, parse_float=_refuse_float)
    return text.encode("utf-8")


_FLOAT_HINT = re.compile(r"[:,\[]-?[0-9]+[.eE]")


def _refuse_float(text: str) -> Any:
    raise TypeError(f"canonical JSON carries integers only, not floats ({text})")


def _refuse(value: Any) -> Any:
    raise TypeError(f"{type(value).__name__} is not part of the snapshot format")
