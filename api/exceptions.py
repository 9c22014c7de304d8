"""One error shape for every failure: ``{"error": code, "detail": message, "fields": {...}}``."""

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.core.exceptions import ValidationError as DjangoValidationError
from rest_framework import exceptions, status
from rest_framework.views import exception_handler

from limits.core.audit import StaleRevision

from .etags import etag_for


class PreconditionFailed(exceptions.APIException):
    status_code = status.HTTP_412_PRECONDITION_FAILED
    default_detail = "The object changed since you read it; fetch it again and retry."
    default_code = "precondition_failed"


def _from_django(exc):
    if isinstance(exc, DjangoValidationError):
        if hasattr(exc, "error_dict"):
            return exceptions.ValidationError(exc.message_dict)
        return exceptions.ValidationError({"non_field_errors": exc.messages})
    if isinstance(exc, DjangoPermissionDenied):
        return exceptions.PermissionDenied(str(exc) or None)
    if isinstance(exc, StaleRevision):
        return PreconditionFailed(str(exc))
    return exc


def sluice_exception_handler(exc, context):
    """DRF's handler, fed Django's exceptions too, with the body reshaped."""
    converted = _from_django(exc)
    response = exception_handler(converted, context)
    if response is None:
        return None
    if isinstance(converted, exceptions.ValidationError):
        fields = (
            converted.detail
            if isinstance(converted.detail, dict)
            else {"non_field_errors": converted.detail}
        )
        response.data = {
            "error": "invalid",
            "detail": "Some fields are not valid.",
            "fields": fields,
        }
    else:
        detail = (
            response.data.get("detail", "")
            if isinstance(response.data, dict)
            else response.data
        )
        code = getattr(detail, "code", None) or getattr(
            converted, "default_code", "error"
        )
        response.data = {"error": code, "detail": str(detail)}
    if isinstance(exc, StaleRevision):
        response["ETag"] = etag_for(exc.current)
    return response
