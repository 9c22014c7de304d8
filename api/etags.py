"""ETags: optimistic concurrency for rule objects (``ETag`` on reads, ``If-Match`` on
writes), and the ``If-None-Match`` of conditional reads (the gateways' poll)."""

from django.utils.http import parse_etags
from rest_framework import exceptions

ANY = "*"
#: The most entity tags of one ``If-None-Match`` looked at; a gateway sends one.
MAX_NONE_MATCH_TAGS = 16


def if_none_match_tags(request) -> frozenset[str]:
    """The entity tags of ``If-None-Match``, for the weak comparison RFC 9110 (13.1.2)
    asks of it: ``W/"x"`` and ``"x"`` are both ``"x"`` here; ``*`` stays ``*``; a
    malformed member is ignored. Empty when the header is absent."""
    tags = parse_etags(request.headers.get("If-None-Match", ""))
    return frozenset(tag.removeprefix("W/") for tag in tags[:MAX_NONE_MATCH_TAGS])


def etag_for(revision: int) -> str:
    return f'"r{revision}"'


def expected_revision(request) -> int | None:
    """The revision named by ``If-Match`` (None when absent or ``*``); 400 if malformed."""
    header = request.headers.get("If-Match", "").strip()
    if not header or header == ANY:
        return None
    tag = header.removeprefix("W/").strip('"')
    if not tag.startswith("r") or not tag[1:].isdigit():
        raise exceptions.ValidationError(
            {"If-Match": [f"Not an ETag this API issued: {header!r}."]}
        )
    return int(tag[1:])


class ETagMixin:
    """Adds ``ETag: "r<revision>"`` to single-object responses of a viewset."""

    def finalize_response(self, request, response, *args, **kwargs):
        response = super().finalize_response(request, response, *args, **kwargs)
        revision = (
            response.data.get("revision") if isinstance(response.data, dict) else None
        )
        if response.status_code in (200, 201) and isinstance(revision, int):
            response["ETag"] = etag_for(revision)
        return response
