"""Request-wide middleware of the control plane: the request id, the request log, the
input guard, and the 503 page of a store that is down."""

import logging
import re
import time
import uuid

import redis
from django.conf import settings
from django.db import DatabaseError, InterfaceError, OperationalError
from django.http import HttpResponse
from django.utils.html import escape

from api.problems import is_api_path, problem_response
from sluice import protocol

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


request_log = logging.getLogger("sluice.request")


class RequestLogMiddleware:
    """One log line per request (logger ``sluice.request``), after its answer.

    Fields: ``request_id``, ``user`` (a person, by session or API token) or
    ``gateway`` (the ``Sluice-Gateway-Id`` it sent), ``method``, ``path`` (no
    query string: it may carry what a log should not), ``status`` and
    ``duration_ms``. Plain text by default; ``SLUICE_LOG_FORMAT=json`` makes
    them JSON fields (``controlplane.logs``). A gateway's poll answered 304,
    nearly all of a fleet's traffic (counted in ``/metrics``, shown on the fleet
    page), is logged at DEBUG; everything else at INFO.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        started = time.monotonic()
        response = self.get_response(request)
        unchanged_poll = response.status_code == 304 and hasattr(request, "sluice_poll")
        level = logging.DEBUG if unchanged_poll else logging.INFO
        if not request_log.isEnabledFor(level):  # the poll's 304s, at INFO
            return response
        fields = {
            "request_id": getattr(request, "id", ""),
            **_who(request),
            "method": request.method,
            "path": request.path,
            "status": response.status_code,
            "duration_ms": round((time.monotonic() - started) * 1000, 1),
        }
        who = " ".join(f"{k}={v}" for k, v in fields.items() if k in _WHO_FIELDS)
        request_log.log(
            level,
            "%s %s %s %.1f ms %s",
            fields["method"],
            fields["path"],
            fields["status"],
            fields["duration_ms"],
            who,
            extra=fields,
        )
        return response


_WHO_FIELDS = ("user", "gateway", "request_id")


def _who(request) -> dict[str, str]:
    """Who made the request: ``request.user`` is set by the session and by DRF's
    token authentication alike; a gateway names itself in a header."""
    try:  # a session not read yet is read now: the database may be what failed
        user = getattr(request, "user", None)
        if user is not None and user.is_authenticated:
            return {"user": user.get_username()}
    except DatabaseError:
        pass
    gateway = request.headers.get(protocol.GATEWAY_ID)
    return {"gateway": gateway[:128]} if gateway else {}


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


#: Seconds clients are told to wait when a store is down (Retry-After).
OUTAGE_RETRY_AFTER = 5
#: What a store that cannot be reached raises: Postgres (Django's wrappers) and Redis.
OUTAGE_ERRORS = (
    OperationalError,
    InterfaceError,
    redis.ConnectionError,
    redis.TimeoutError,
)


class OutageMiddleware:
    """A page that failed because Postgres or Redis is down answers a plain 503 with
    ``Retry-After``, not a 500: the admin and the dashboards (the API's own handler
    answers a problem document the same way, ``api.exceptions``)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        if not isinstance(exception, OUTAGE_ERRORS):
            return None
        store = "Redis" if isinstance(exception, redis.RedisError) else "The database"
        request_log.warning(
            "store unavailable: %s: %s", type(exception).__name__, exception
        )
        body = (
            "<!doctype html><title>Service unavailable</title>"
            f"<h1>Service unavailable</h1><p>{store} is unavailable; "
            f"retry in a few seconds.</p><p>Request {escape(getattr(request, 'id', ''))}</p>"
        )
        response = HttpResponse(
            body, status=503, content_type="text/html; charset=utf-8"
        )
        response["Retry-After"] = str(OUTAGE_RETRY_AFTER)
        return response
