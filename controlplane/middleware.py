"""Request-wide middleware of the control plane: the request id, and the request log."""

import logging
import re
import time
import uuid

from django.db import DatabaseError

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
