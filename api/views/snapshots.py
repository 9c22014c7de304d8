"""What gateways call: the snapshot bundle (``docs/gateway-protocol.md``) and single versions.

The bundle endpoint is a contract with every gateway in the fleet and the
busiest path of the control plane: one Redis round trip and no database query
for a 304, bytes prepared at publish time for a 200.
"""

import time

from django.db import DatabaseError
from django.http import HttpResponse, HttpResponseNotModified
from django.shortcuts import get_object_or_404
from django.utils.cache import patch_vary_headers
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions
from rest_framework.views import APIView

from api.authentication import GatewayTokenAuthentication, bearer_secret
from api.etags import if_none_match_tags
from api.permissions import GatewayOrRole
from api.schema import ProblemSerializer
from limits.core.audit import request_ip
from limits.core.signing import bundle_sign
from limits.gateways.bundle import Bundle, etag_held, snapshot_bundle_get
from limits.gateways.polling import PollOutcome, PollUnavailable, gateway_poll
from limits.gateways.reports import GatewayReport, parse_gateway_id, parse_version
from limits.gateways.window import (
    poll_redis_timeout,
    poll_window_saw_version,
    version_published,
)
from limits.models import GatewayToken, Snapshot
from sluice import protocol

GATEWAY_HEADERS = [
    OpenApiParameter(
        protocol.GATEWAY_ID,
        str,
        OpenApiParameter.HEADER,
        required=True,
        description="A stable id of the gateway, e.g. its host name.",
    ),
    OpenApiParameter(
        protocol.APPLIED_VERSION,
        int,
        OpenApiParameter.HEADER,
        description="The snapshot version the gateway enforces now.",
    ),
    OpenApiParameter(
        protocol.REHEARSED_VERSION,
        int,
        OpenApiParameter.HEADER,
        description="The scheduled version the gateway rehearses in shadow, if any.",
    ),
    OpenApiParameter(
        protocol.REJECTED_VERSION,
        int,
        OpenApiParameter.HEADER,
        description="A version the gateway refused.",
    ),
    OpenApiParameter(
        protocol.REJECTED_REASON,
        str,
        OpenApiParameter.HEADER,
        description="Why it refused it (one line).",
    ),
    OpenApiParameter(
        "If-None-Match",
        str,
        OpenApiParameter.HEADER,
        description="The ETag of the bundle the gateway holds (weak comparison: "
        'W/"…", lists and * are understood).',
    ),
]


def _reject_query(request) -> None:
    if request.query_params:
        raise exceptions.ValidationError(
            {
                name: ["Unknown query parameter."]
                for name in sorted(request.query_params)
            }
        )


def _optional_version(request, header: str) -> int | None:
    """The published version ``header`` names; 400 for anything else (a version above
    the latest would show the gateway in sync with rules it never had)."""
    value = request.headers.get(header)
    if value is None or value == "":
        return None
    try:
        version = parse_version(value)
    except ValueError:
        raise exceptions.ValidationError(
            {header: ["Must be a snapshot version number."]}
        ) from None
    if not version_published(version):
        raise exceptions.ValidationError(
            {header: [f"Version {version} has not been published."]}
        )
    return version


def gateway_report(request) -> GatewayReport:
    """The ``Sluice-Gateway-*`` headers of a poll; 400 naming the header that is wrong."""
    try:
        gateway = parse_gateway_id(request.headers.get(protocol.GATEWAY_ID, ""))
    except ValueError as exc:
        raise exceptions.ValidationError(
            {protocol.GATEWAY_ID: [str(exc).capitalize() + "."]}
        ) from None
    reason = request.headers.get(protocol.REJECTED_REASON, "")[
        : protocol.MAX_REJECTED_REASON
    ]
    return GatewayReport(
        gateway=gateway,
        applied=_optional_version(request, protocol.APPLIED_VERSION),
        rejected=_optional_version(request, protocol.REJECTED_VERSION),
        reason=reason,
        seen=time.time(),
        token="",
        address=request_ip(request.META) or "",
        rehearsed=_optional_version(request, protocol.REHEARSED_VERSION),
    )


def _bytes_response(
    request, *, body: bytes, body_gzip: bytes, etag: str, signature: str = ""
) -> HttpResponse:
    gzip_ok = "gzip" in request.headers.get("Accept-Encoding", "")
    response = HttpResponse(
        body_gzip if gzip_ok else body, content_type="application/json"
    )
    if gzip_ok:
        response["Content-Encoding"] = "gzip"
    response["ETag"] = etag
    response["Vary"] = "Accept-Encoding"
    if signature:  # of ``body``, whichever encoding is sent
        response[protocol.SIGNATURE] = signature
    return response


class SnapshotBundleView(APIView):
    """The active snapshot and the scheduled ones, for gateways; 304 when unchanged."""

    authentication_classes = []  # the token is checked inside the poll's one Redis call
    permission_classes = []
    throttle_classes = []
    _drf_headers: dict[str, str] | None = None

    def get_authenticate_header(self, request):
        return GatewayTokenAuthentication().authenticate_header(request)

    def dispatch(self, request, *args, **kwargs):
        """A well-formed poll skips DRF's request wrapping and content negotiation
        (~40 % of a 304's time, ``docs/benchmarks.md``); anything else, errors
        included, goes through DRF as usual."""
        if request.method == "GET":
            response = self._plain(request)
            if response is not None:
                return self._finalize(response)
        return super().dispatch(request, *args, **kwargs)

    def _finalize(self, response: HttpResponse) -> HttpResponse:
        """The headers DRF's ``finalize_response`` adds (``Allow``, ``Vary``)."""
        cls = type(self)
        if cls._drf_headers is None:  # the same for every request of this view
            cls._drf_headers = dict(self.default_response_headers)
        headers = dict(cls._drf_headers)
        vary = headers.pop("Vary", None)
        if vary:
            patch_vary_headers(response, [vary])
        for name, value in headers.items():
            response[name] = value
        return response

    def _plain(self, request) -> HttpResponse | None:
        secret = bearer_secret(request, GatewayToken.PREFIX)
        if request.META.get("QUERY_STRING") or secret is None:
            return None
        try:
            report = gateway_report(request)
        except exceptions.ValidationError:
            return None
        return _answer(request, secret, report, errors=False)

    @extend_schema(
        operation_id="snapshot_bundle_get",
        parameters=GATEWAY_HEADERS,
        auth=[{"gatewayToken": []}],
        responses={
            200: OpenApiResponse(
                OpenApiTypes.OBJECT,
                description='{"active": document, "scheduled": [documents]}',
            ),
            304: OpenApiResponse(description="The bundle has not changed."),
            400: ProblemSerializer,
            401: ProblemSerializer,
            503: OpenApiResponse(
                ProblemSerializer,
                description="Nothing has been published yet, or the control plane "
                "can reach neither its Redis nor its database (with Retry-After).",
            ),
        },
    )
    def get(self, request):
        _reject_query(request)
        secret = bearer_secret(request, GatewayToken.PREFIX)
        if secret is None:
            raise exceptions.NotAuthenticated(
                "A gateway token is required: Authorization: Bearer slg_..."
            )
        return _answer(request, secret, gateway_report(request), errors=True)


def _answer(request, secret: str, report: GatewayReport, *, errors: bool):
    """304 or the bundle; a refused token or no bundle raises (``errors``) or gives None."""
    held = if_none_match_tags(request)
    outcome = getattr(request, "sluice_poll", None)  # polled already by the plain path
    if outcome is None:
        try:
            outcome = gateway_poll(secret=secret, report=report, held=held)
        except PollUnavailable:
            if not errors:
                return None
            raise StateUnavailable() from None
        request.sluice_poll = outcome
    if not outcome.authorized:
        if not errors:
            return None
        raise exceptions.AuthenticationFailed("Invalid or revoked gateway token.")
    if outcome.etag is not None and etag_held(held, outcome.etag):
        return _not_modified_response(outcome.etag)
    try:
        bundle = _bundle(outcome)
    except DatabaseError:  # Redis down too (snapshot_bundle_get tried Postgres)
        if not errors:
            return None
        raise StateUnavailable() from None
    if bundle is None:
        if not errors:
            return None
        raise NothingPublished()
    if etag_held(held, bundle.etag):
        return _not_modified_response(bundle.etag)
    return _bytes_response(
        request,
        body=bundle.body,
        body_gzip=bundle.body_gzip,
        etag=bundle.etag,
        signature=bundle.signature,
    )


#: The last bundles this process served, by ETag: a bundle's bytes never change
#: for a given ETag, so a 200 sends them from memory instead of reading both
#: bodies (6 MB + 0.6 MB with 100,000 tenants) from Redis for each gateway.
_BUNDLES: dict[str, Bundle] = {}


def _bundle(outcome: PollOutcome) -> Bundle | None:
    bundle = _BUNDLES.get(outcome.etag) if outcome.etag is not None else None
    if bundle is None:
        # outcome's: built from Postgres; else Redis's, within the poll path's timeout
        bundle = outcome.bundle or snapshot_bundle_get(timeout=poll_redis_timeout())
        if bundle is not None:
            if len(_BUNDLES) >= 2:
                _BUNDLES.clear()
            _BUNDLES[bundle.etag] = bundle
    if bundle is not None:  # what reports may name from now on, without a query
        poll_window_saw_version(bundle.generation[0])
    return bundle


def _not_modified_response(etag: str) -> HttpResponseNotModified:
    response = HttpResponseNotModified()
    response["ETag"] = etag
    response["Vary"] = "Accept-Encoding"  # what the 200 would say (RFC 9110, 15.4.5)
    return response


class NothingPublished(exceptions.APIException):
    status_code = 503
    default_detail = (
        "Nothing has been published yet; keep the rules you have and poll again."
    )
    default_code = "nothing_published"
    wait = 5  #: seconds, sent as Retry-After


class StateUnavailable(exceptions.APIException):
    """Neither the control plane's Redis nor its database answered (never a 500)."""

    status_code = 503
    default_detail = (
        "The control plane cannot read its state right now; "
        "keep the rules you have and poll again."
    )
    default_code = "control_plane_unavailable"
    wait = 5  #: seconds, sent as Retry-After


class SnapshotDocumentView(APIView):
    """One published version's document, as stored (gateway tokens and people), signed
    like the bundle: whoever keeps a copy can check it came from this control plane."""

    permission_classes = [GatewayOrRole]

    @extend_schema(
        operation_id="snapshot_document_get",
        responses={
            200: OpenApiResponse(
                OpenApiTypes.OBJECT,
                description="A snapshot document, with its Sluice-Signature "
                "(Ed25519, over the uncompressed bytes).",
            )
        },
    )
    def get(self, request, version: int):
        _reject_query(request)
        row = get_object_or_404(
            Snapshot.objects.only("content", "content_gzip", "hash"), version=version
        )
        response = _bytes_response(
            request,
            body=bytes(row.content),
            body_gzip=bytes(row.content_gzip),
            etag=f'"{row.hash}"',
            signature=bundle_sign(bytes(row.content)),
        )
        response["Cache-Control"] = (
            "public, max-age=31536000, immutable"  # versions never change
        )
        return response
