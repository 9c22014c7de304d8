"""Pagination of every list endpoint: ``?limit=`` and ``?offset=``, bounded and checked.

DRF's own pagination ignores a ``limit`` it cannot read (``abc``, ``-1``) and
passes any number on to Postgres (``279924996891467579392`` was a 500: bigint
out of range). Here a value that is not a whole number in range is a 400
naming the parameter, and the schema states the range, so clients know it.
"""

from django.conf import settings
from rest_framework import exceptions
from rest_framework.pagination import LimitOffsetPagination

__all__ = ["MAX_OFFSET", "BoundedLimitOffsetPagination", "query_int"]

#: The largest offset (Postgres' integer range; far past any table here).
MAX_OFFSET = 2**31 - 1


def query_int(request, name: str, *, minimum: int, maximum: int) -> int | None:
    """The whole number ``?name=`` of ``request`` (None if absent); 400 naming it unless
    it is written in decimal digits and lies within ``minimum`` and ``maximum``."""
    raw = request.query_params.get(name)
    if raw is None:
        return None
    text = raw.strip()
    digits = text.removeprefix("-")
    if not digits.isascii() or not digits.isdigit() or len(digits) > 18:
        raise exceptions.ValidationError(
            {name: [f"Must be a whole number from {minimum} to {maximum}."]}
        )
    value = int(text)
    if not minimum <= value <= maximum:
        raise exceptions.ValidationError(
            {name: [f"Must be a whole number from {minimum} to {maximum}."]}
        )
    return value


class BoundedLimitOffsetPagination(LimitOffsetPagination):
    """DRF's limit/offset pagination; ``limit`` 1 to ``SLUICE_MAX_PAGE_SIZE``, ``offset``
    0 to :data:`MAX_OFFSET`, anything else a 400."""

    def get_limit(self, request):
        limit = query_int(
            request, self.limit_query_param, minimum=1, maximum=self._max_limit()
        )
        return self.default_limit if limit is None else limit

    def get_offset(self, request):
        offset = query_int(
            request, self.offset_query_param, minimum=0, maximum=MAX_OFFSET
        )
        return offset or 0

    def _max_limit(self) -> int:
        return int(settings.SLUICE_MAX_PAGE_SIZE)

    def get_schema_operation_parameters(self, view):
        parameters = super().get_schema_operation_parameters(view)
        bounds = {
            self.limit_query_param: {"minimum": 1, "maximum": self._max_limit()},
            self.offset_query_param: {"minimum": 0, "maximum": MAX_OFFSET},
        }
        for parameter in parameters:
            parameter["schema"].update(bounds[parameter["name"]])
        return parameters
