"""OpenAPI generation: every operation documents the errors it can answer with."""

from drf_spectacular.openapi import AutoSchema
from rest_framework import serializers


class ErrorSerializer(serializers.Serializer):
    error = serializers.CharField(
        help_text="A stable code: invalid, not_found, permission_denied..."
    )
    detail = serializers.CharField(help_text="What went wrong, for people.")
    fields = serializers.DictField(
        child=serializers.JSONField(),
        required=False,
        help_text=(
            "With 400: for each field at fault, its messages; for an item of a list or a "
            'nested object, an object keyed by index or member: {"limits": {"0": {"burst": [...]}}}.'
        ),
    )


class SluiceAutoSchema(AutoSchema):
    """drf-spectacular's schema plus the error responses our exception handler produces."""

    def _get_response_bodies(self, direction="response"):
        responses = super()._get_response_bodies(direction)
        for code in self._error_codes():
            responses.setdefault(
                code, self._get_response_for_code(ErrorSerializer, code)
            )
        return responses

    def _error_codes(self) -> list[str]:
        codes = [
            "400",
            "401",
            "403",
        ]  # 400: bad input, including unknown query parameters
        if "{" in self.path:
            codes.append("404")
        if self.method in ("PUT", "PATCH", "DELETE") and hasattr(
            self.view, "expected_revision"
        ):
            codes.append("412")
        return codes
