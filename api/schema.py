"""OpenAPI generation: every operation documents the errors it can answer with, as
RFC 9457 problem documents (``api.problems``) of media type ``application/problem+json``."""

from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers

from .problems import PROBLEM_CONTENT_TYPE


class ProblemSerializer(serializers.Serializer):
    """The body of every error response of the API (RFC 9457 problem details)."""

    type = serializers.CharField(
        help_text='A URI naming the kind of problem; "about:blank": the status says it.'
    )
    title = serializers.CharField(help_text="The HTTP status phrase, e.g. Not Found.")
    status = serializers.IntegerField(help_text="The HTTP status code, repeated.")
    detail = serializers.CharField(help_text="What went wrong, for people.")
    error = serializers.CharField(
        help_text="A stable code for programs: invalid, not_found, permission_denied..."
    )
    fields = serializers.DictField(
        child=serializers.JSONField(),
        required=False,
        help_text=(
            "With 400: for each field, query parameter or header at fault, its messages; "
            "for an item of a list or a nested object, an object keyed by index or member: "
            '{"limits": {"0": {"burst": [...]}}}.'
        ),
    )


_WRITES = ("POST", "PUT", "PATCH")


class SluiceAutoSchema(AutoSchema):
    """drf-spectacular's schema plus the error responses our exception handler produces."""

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        for code in self._error_codes():
            responses.setdefault(
                code, self._get_response_for_code(ProblemSerializer, code)
            )
        return responses

    def _get_response_for_code(
        self, serializer, status_code, media_types=None, direction="response"
    ):
        if str(status_code) >= "400" and media_types is None:
            media_types = [PROBLEM_CONTENT_TYPE]
        return super()._get_response_for_code(
            serializer, status_code, media_types, direction
        )

    def _error_codes(self) -> list[str]:
        # 400: bad input (unknown query parameters included); 414: a URL too long
        codes = ["400", "401", "403", "406", "414"]
        if "{" in self.path:
            codes.append("404")
        if self.method in _WRITES:
            codes += ["413", "415"]
        if self.method in (*_WRITES, "DELETE"):
            codes.append("409")  # lost a race with another write (or a delete: 404)
        if self.method in ("PUT", "PATCH", "DELETE") and hasattr(
            self.view, "expected_revision"
        ):
            codes.append("412")
        return codes


def strict_request_bodies(result, generator, request, public):
    """drf-spectacular postprocessing hook: request bodies allow no other members
    (``additionalProperties: false``), as the strict serializers refuse them."""
    schemas = result.get("components", {}).get("schemas", {})
    pending = [
        media["schema"]
        for item in result.get("paths", {}).values()
        for operation in item.values()
        if isinstance(operation, dict)
        for media in operation.get("requestBody", {}).get("content", {}).values()
    ]
    seen: set[int] = set()
    while pending:
        schema = pending.pop()
        if id(schema) in seen or not isinstance(schema, dict):
            continue
        seen.add(id(schema))
        if "$ref" in schema:
            pending.append(schemas.get(schema["$ref"].rsplit("/", 1)[-1]))
            continue
        if "properties" in schema:
            schema.setdefault("additionalProperties", False)
            pending.extend(schema["properties"].values())
        pending.extend(schema.get("allOf", []) + schema.get("oneOf", []))
        if isinstance(schema.get("items"), dict):
            pending.append(schema["items"])
    return result
