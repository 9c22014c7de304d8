"""The API's request parsers: JSON, bounded in size and depth, free of NUL characters;
and, for the rules-as-code endpoints, a rules file sent as it is (``application/yaml``).

Python's ``json`` follows nesting as deep as the body goes (a ``[`` x 5000 body
was a ``RecursionError``, a 500), reads as much as a client sends, and accepts
``\\u0000``, which Postgres refuses to store in text. Each limit is a setting
(``SLUICE_JSON_MAX_DEPTH``, ``DATA_UPLOAD_MAX_MEMORY_SIZE``) and each refusal a
400 or 413 in the API's error shape.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.exceptions import ParseError
from rest_framework.parsers import BaseParser, JSONParser
from rest_framework.utils import json

from .exceptions import BodyTooLarge

__all__ = ["BoundedJSONParser", "RulesFileParser", "json_problem"]


class BoundedJSONParser(JSONParser):
    """DRF's JSON parser, refusing bodies that are too large, too deep or hold NUL."""

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:  # a chunked body has no Content-Length the middleware saw
            raise BodyTooLarge(f"The request body is larger than {limit} bytes.")
        encoding = (parser_context or {}).get("encoding") or settings.DEFAULT_CHARSET
        try:
            data = json.loads(
                raw.decode(encoding),
                parse_constant=json.strict_constant if self.strict else None,
            )
        except RecursionError:
            data, problem = None, _too_deep()
        except (ValueError, LookupError) as exc:
            raise ParseError(f"JSON parse error - {exc}") from None
        else:
            problem = json_problem(data, max_depth=settings.SLUICE_JSON_MAX_DEPTH)
        if problem:
            raise ParseError(problem)
        return data


class RulesFileParser(BaseParser):
    """A rules file as the body (what ``rules export`` gives): the view's input is
    ``{"document": <the body>}`` plus the query's parameters (``?publish=true``).

    The YAML itself is read by ``limits.ascode`` like any other rules file (its
    problems at their line, anchors and aliases refused); here only the size and
    the encoding are checked."""

    media_type = "application/yaml"

    def parse(self, stream, media_type=None, parser_context=None):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        raw = stream.read(limit + 1) if stream is not None else b""
        if len(raw) > limit:
            raise BodyTooLarge(f"The request body is larger than {limit} bytes.")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ParseError(f"A rules file is UTF-8 text: {exc}") from None
        if "\x00" in text:
            raise ParseError("Text with a NUL character (\\u0000) is refused.")
        request = (parser_context or {}).get("request")
        query = request.query_params.dict() if request is not None else {}
        return {**query, "document": text}


def _too_deep() -> str:
    return (
        f"JSON nested deeper than {settings.SLUICE_JSON_MAX_DEPTH} levels is refused."
    )


def json_problem(data: Any, *, max_depth: int) -> str | None:
    """Why ``data`` (parsed JSON) is refused, or None: too deep, or a NUL character."""
    pending: list[tuple[Any, int]] = [(data, 1)]
    while pending:
        value, depth = pending.pop()
        if isinstance(value, str):
            if "\x00" in value:
                return "Text with a NUL character (\\u0000) is refused."
            continue
        if not isinstance(value, dict | list):
            continue
        if depth > max_depth:
            return _too_deep()
        items = value.items() if isinstance(value, dict) else enumerate(value)
        for key, item in items:
            if isinstance(key, str) and "\x00" in key:
                return "Text with a NUL character (\\u0000) is refused."
            pending.append((item, depth + 1))
    return None
