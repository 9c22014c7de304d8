"""DRF's exception handler, answering every error in the API's one shape (``api.problems``).

Django's and the domain's exceptions are turned into DRF's first, so none of
them reaches Django as a 500: a validation error is a 400 with ``fields``, a
row deleted while a request wrote it a 404, a write that lost a race on a
unique constraint a 409, a body above ``DATA_UPLOAD_MAX_MEMORY_SIZE`` a 413,
and a database or Redis that cannot be reached or did not answer in time
(Django's ``OperationalError`` or ``InterfaceError``, redis-py's
``ConnectionError`` or ``TimeoutError``) a 503 with ``Retry-After``.
"""

import logging

import redis
from django.core.exceptions import ObjectDoesNotExist, RequestDataTooBig
from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, InterfaceError, OperationalError
from rest_framework import exceptions, status
from rest_framework.views import exception_handler

from limits.changes.publishing import ChangeConflict
from limits.core.audit import StaleRevision
from limits.rules.claims import RouteClaimed

from .etags import etag_for
from .problems import PROBLEM_CONTENT_TYPE, problem

log = logging.getLogger("sluice.api")


class PreconditionFailed(exceptions.APIException):
    status_code = status.HTTP_412_PRECONDITION_FAILED
    default_detail = "The object changed since you read it; fetch it again and retry."
    default_code = "precondition_failed"


class Conflict(exceptions.APIException):
    status_code = status.HTTP_409_CONFLICT
    default_detail = "Another request changed the same data at the same time; fetch it again and retry."
    default_code = "conflict"


class BodyTooLarge(exceptions.APIException):
    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "body_too_large"


class DatabaseUnavailable(exceptions.APIException):
    status_code = status.HTTP_503_SERVICE_UNAVAILABLE
    default_detail = "The database is unavailable; retry in a few seconds."
    default_code = "database_unavailable"
    wait = 5  # DRF sends it as Retry-After


class StoreUnavailable(DatabaseUnavailable):
    default_detail = "Redis is unavailable; retry in a few seconds."
    default_code = "redis_unavailable"


def _from_django(exc):
    if isinstance(exc, RouteClaimed):  # a lost race, not bad input
        return Conflict("; ".join(exc.messages))
    if isinstance(exc, DjangoValidationError):
        if hasattr(exc, "error_dict"):
            return exceptions.ValidationError(exc.message_dict)
        return exceptions.ValidationError({"non_field_errors": exc.messages})
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied(str(exc) or None)
    if isinstance(exc, StaleRevision):
        return PreconditionFailed(str(exc))
    if isinstance(exc, ObjectDoesNotExist):  # deleted by another request meanwhile
        return exceptions.NotFound(str(exc) or None)
    if isinstance(exc, IntegrityError):
        return Conflict()
    if isinstance(exc, OperationalError | InterfaceError):
        log.warning("database unavailable: %s: %s", type(exc).__name__, exc)
        return DatabaseUnavailable()
    if isinstance(exc, redis.ConnectionError | redis.TimeoutError):
        log.warning("redis unavailable: %s: %s", type(exc).__name__, exc)
        return StoreUnavailable()
    if isinstance(exc, RequestDataTooBig):
        return BodyTooLarge(str(exc) or None)
    return exc


def sluice_exception_handler(exc, context):
    """DRF's handler, fed Django's exceptions too, with the body a problem document."""
    converted = _from_django(exc)
    if isinstance(exc, ChangeConflict) and context["request"].method != "GET":
        # publishing a request the versions published since conflict with; reading
        # its impact stays a 400 (nothing can be estimated for it)
        converted = Conflict("; ".join(exc.messages))
    response = exception_handler(converted, context)
    if response is None:
        return None
    if isinstance(converted, exceptions.ValidationError):
        fields = (
            converted.detail
            if isinstance(converted.detail, dict)
            else {"non_field_errors": converted.detail}
        )
        response.data = problem(
            response.status_code,
            detail="Some fields are not valid.",
            code="invalid",
            fields=fields,
        )
    else:
        detail = (
            response.data.get("detail", "")
            if isinstance(response.data, dict)
            else response.data
        )
        code = getattr(detail, "code", None) or getattr(
            converted, "default_code", "error"
        )
        response.data = problem(response.status_code, detail=str(detail), code=code)
    response.content_type = PROBLEM_CONTENT_TYPE
    if isinstance(exc, StaleRevision):
        response["ETag"] = etag_for(exc.current)
    return response
