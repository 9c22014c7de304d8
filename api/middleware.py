"""Every error under ``/api/`` in the API's one shape, whoever answered it.

DRF's exception handler covers the views. Other errors are Django's: a 404 for
a path no route matches (``/api/v1/tiers/%C2%84``, ``/api/v1/snapshots/abc/rollback``),
a 400 for a bad Host, a 500 page, the debug pages of ``DEBUG``. This middleware,
the outermost, rewrites any error response under ``/api/`` that is not a problem
document into one, keeping its status and headers (``Allow``, ``Retry-After``...).
"""

from __future__ import annotations

from django.http import HttpResponse

from .problems import PROBLEM_CONTENT_TYPE, is_api_path, problem_response

__all__ = ["ApiProblemMiddleware"]

#: What people read for errors Django answered (DRF's carry their own detail).
DETAILS = {
    400: "The request is malformed.",
    403: "Forbidden.",
    404: "Nothing here: no such endpoint, or no such object.",
    405: "This endpoint does not answer this method.",
    500: "The server failed to answer this request; it is logged with its X-Request-ID.",
}
_REPLACED_HEADERS = {"content-type", "content-length"}


class ApiProblemMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        if response.status_code < 400 or not is_api_path(request.path_info):
            return response
        if response.get("Content-Type", "").startswith(PROBLEM_CONTENT_TYPE):
            return response
        return _as_problem(response, request_id=getattr(request, "id", ""))


def _as_problem(response: HttpResponse, *, request_id: str) -> HttpResponse:
    status = response.status_code
    detail = DETAILS.get(status, f"{response.reason_phrase}.")
    if status >= 500 and request_id:  # what support asks for: the log line's id
        detail = f"{detail.removesuffix('.')} (request {request_id})."
    replaced = problem_response(status, detail=detail)
    for name, value in response.headers.items():
        if name.lower() not in _REPLACED_HEADERS:
            replaced[name] = value
    replaced.cookies = response.cookies
    return replaced
