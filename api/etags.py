"""Optimistic concurrency for rule objects: ``ETag`` on reads, ``If-Match`` on writes."""

from rest_framework import exceptions

ANY = "*"


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
