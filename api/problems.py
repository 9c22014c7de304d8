"""The one error shape of the API: RFC 9457 problem details (``application/problem+json``).

Every error under ``/api/`` has the members ``type``, ``title``, ``status`` and
``detail`` of RFC 9457, plus two extensions: ``error``, a stable code for
programs (``invalid``, ``not_found``...), and, with 400, ``fields``: the
messages of each field, query parameter or header at fault. It is the shape of
the enforcement client's 429 (``sluice.headers``), which has ``error`` too.

DRF's exception handler (``api.exceptions``), the middleware that refuses input
before a view runs, and Django's own error handlers all answer through
:func:`problem_response`, so no error under ``/api/`` is HTML.
"""

from __future__ import annotations

import json
from http import HTTPStatus
from typing import Any

from django.http import HttpResponse

__all__ = [
    "API_PREFIX",
    "PROBLEM_CONTENT_TYPE",
    "PROBLEM_TYPE",
    "is_api_path",
    "problem",
    "problem_response",
]

PROBLEM_CONTENT_TYPE = "application/problem+json"
#: RFC 9457 4.2.1: no type beyond the status code; ``error`` refines it.
PROBLEM_TYPE = "about:blank"
API_PREFIX = "/api/"


def is_api_path(path: str) -> bool:
    """Whether ``path`` is the API's (its errors are problem+json, not HTML)."""
    return path.startswith(API_PREFIX)


def status_code_name(status: int) -> str:
    """``not_found`` for 404: the ``error`` code of a status without a finer one."""
    try:
        return HTTPStatus(status).phrase.lower().replace(" ", "_").replace("-", "_")
    except ValueError:
        return "error"


def problem(
    status: int,
    *,
    detail: str,
    code: str | None = None,
    fields: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The problem document of an error answered with ``status``."""
    try:
        title = HTTPStatus(status).phrase
    except ValueError:
        title = "Error"
    body: dict[str, Any] = {
        "type": PROBLEM_TYPE,
        "title": title,
        "status": status,
        "detail": detail,
        "error": code or status_code_name(status),
    }
    if fields is not None:
        body["fields"] = fields
    return body


def problem_response(
    status: int,
    *,
    detail: str,
    code: str | None = None,
    fields: dict[str, Any] | None = None,
) -> HttpResponse:
    """A plain Django response carrying :func:`problem` (for code that runs outside DRF)."""
    body = problem(status, detail=detail, code=code, fields=fields)
    return HttpResponse(
        json.dumps(body), status=status, content_type=PROBLEM_CONTENT_TYPE
    )
