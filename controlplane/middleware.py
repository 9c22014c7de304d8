"""Request-wide middleware of the control plane."""

import re
import uuid

from django.conf import settings
from django.http import HttpResponse
from django.utils.html import escape

from api.problems import is_api_path, problem_response

_SAFE_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


class RequestIdMiddleware:
    """Give every request an id (``X-Request-ID`` if sane, else a new one) and echo it.

    The audit log records the id, so a change can be traced to the request that made it.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        incoming = request.headers.get("X-Request-ID", "")
        request.id = incoming if _SAFE_ID.match(incoming) else uuid.uuid4().hex
        response = self.get_response(request)
        response["X-Request-ID"] = request.id
        return response


class InputGuardMiddleware:
    """Refuse, before any view runs, requests no view can answer sensibly.

    - a NUL byte in the path or the query (Postgres refuses it in text: a 500 in the
      admin's dashboard): 400;
    - a URL longer than ``SLUICE_MAX_URL_LENGTH``: 414;
    - a ``Content-Length`` above ``DATA_UPLOAD_MAX_MEMORY_SIZE``: 413, before the body
      is read (Django's own check answered an HTML 400, and only for forms);
      a ``Content-Length`` that is not a number: 400.

    Under ``/api/`` the answer is the API's problem document, elsewhere a short page.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        refusal = input_refusal(request)
        if refusal is None:
            return self.get_response(request)
        status, code, detail = refusal
        if is_api_path(request.path_info):
            return problem_response(status, code=code, detail=detail)
        page = f"<!doctype html><title>{status}</title><h1>{escape(detail)}</h1>"
        return HttpResponse(page, status=status)


def input_refusal(request) -> tuple[int, str, str] | None:
    """(status, error code, why) when ``request`` is refused by :class:`InputGuardMiddleware`."""
    query = request.META.get("QUERY_STRING", "")
    if "\x00" in request.path_info or "%00" in query or "\x00" in query:
        return 400, "invalid", "A NUL character (%00) in the URL is refused."
    longest = settings.SLUICE_MAX_URL_LENGTH
    if len(request.get_full_path()) > longest:
        return 414, "url_too_long", f"The URL is longer than {longest} characters."
    length = request.META.get("CONTENT_LENGTH") or "0"
    if not length.isdigit():
        return 400, "invalid", f"Content-Length {length[:20]!r} is not a number."
    if int(length) > settings.DATA_UPLOAD_MAX_MEMORY_SIZE:
        return (
            413,
            "body_too_large",
            f"The request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes.",
        )
    return None
