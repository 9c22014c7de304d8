"""Versions, publish, rollback, diff, explain and the fleet: thin views over limits' services."""

from dataclasses import asdict
from datetime import UTC, datetime, timedelta

from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import generics, status
from rest_framework.response import Response
from rest_framework.views import APIView

from api.serializers.impact import ImpactSerializer
from api.serializers.snapshots import (
    DiffQuerySerializer,
    DiffSerializer,
    ExplainQuerySerializer,
    ExplanationSerializer,
    FleetSerializer,
    PublishInputSerializer,
    RehearsalQuerySerializer,
    RehearsalSerializer,
    RollbackInputSerializer,
    SnapshotSerializer,
)
from api.views.base import StrictQueryMixin, actor_from
from limits.gateways.fleet import fleet_status
from limits.models import Snapshot
from limits.publishing.rollback import snapshot_rollback
from limits.publishing.services import snapshot_publish
from limits.support.rejections import RejectionExplanation, rejection_explain
from limits.traffic.impacts import scheduled_impact, working_copy_impact
from limits.traffic.rehearsal import rehearsal_figures
from limits.versions.explain import explain
from limits.versions.selectors import (
    snapshot_active_version,
    snapshot_diff,
    snapshot_get_active,
    snapshot_list,
    snapshot_scheduled,
)
from sluice.model import (
    Candidate,
    Policy,
    describe_limit,
    public_description,
    public_name,
)


class SnapshotListView(StrictQueryMixin, generics.ListAPIView):
    """Every published version, newest first, with its status and change counts."""

    serializer_class = SnapshotSerializer
    filter_backends = []

    def get_queryset(self):
        return snapshot_list()

    def get_serializer_context(self):
        return {
            **super().get_serializer_context(),
            "active_version": snapshot_active_version(),
        }

    @extend_schema(operation_id="snapshot_list")
    def get(self, request, *args, **kwargs):
        return super().get(request, *args, **kwargs)


class SnapshotPublishView(APIView):
    """Publish the working copy as the next version (product role)."""

    @extend_schema(
        operation_id="snapshot_publish",
        request=PublishInputSerializer,
        responses={201: SnapshotSerializer},
    )
    def post(self, request):
        data = PublishInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        row = snapshot_publish(actor=actor_from(request), **data.validated_data)
        return _created(row)


class SnapshotRollbackView(APIView):
    """Publish an earlier version's rules as a new version, and restore the working copy."""

    @extend_schema(
        operation_id="snapshot_rollback",
        request=RollbackInputSerializer,
        responses={201: SnapshotSerializer},
    )
    def post(self, request, version: int):
        data = RollbackInputSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        row = snapshot_rollback(
            actor=actor_from(request), version=version, **data.validated_data
        )
        return _created(row)


def _created(row: Snapshot) -> Response:
    body = SnapshotSerializer(
        row, context={"active_version": snapshot_active_version()}
    ).data
    return Response(
        body, status=status.HTTP_201_CREATED, headers={"ETag": f'"{row.hash}"'}
    )


class SnapshotDiffView(StrictQueryMixin, APIView):
    """Changes between two versions (or the active one and the working copy), classified."""

    def known_query_params(self) -> set[str]:
        return {"old", "new", "format"}

    @extend_schema(
        operation_id="snapshot_diff",
        parameters=[DiffQuerySerializer],
        responses={200: DiffSerializer},
    )
    def get(self, request):
        query = DiffQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        diff = snapshot_diff(
            old=query.validated_data["old"], new=query.validated_data["new"]
        )
        return Response({**query.validated_data, **diff.to_json()})


class SnapshotRehearsalView(StrictQueryMixin, APIView):
    """What gateways' rehearsal of a version saw: per tenant and route, the requests
    it would change and how many it would have rejected (``docs/rehearsal.md``)."""

    def known_query_params(self) -> set[str]:
        return {*RehearsalQuerySerializer().fields, "format"}

    @extend_schema(
        operation_id="snapshot_rehearsal",
        parameters=[RehearsalQuerySerializer],
        responses={200: RehearsalSerializer},
    )
    def get(self, request, version: int):
        query = RehearsalQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        get_object_or_404(Snapshot, version=version)
        since = query.validated_data.get("since") or timezone.now() - timedelta(days=1)
        figures = rehearsal_figures(
            version=version, since=since, tenant=query.validated_data.get("tenant")
        )
        return Response(
            {
                "version": version,
                "since": since,
                "figures": [asdict(figure) for figure in figures],
            }
        )


class WorkingCopyImpactView(APIView):
    """Whom publishing the working copy now would limit, from the recorded traffic."""

    @extend_schema(
        operation_id="working_copy_impact", responses={200: ImpactSerializer}
    )
    def get(self, request):
        return Response(ImpactSerializer(working_copy_impact().to_json()).data)


class SnapshotImpactView(APIView):
    """Whom a scheduled version would limit once it takes effect, from the recorded traffic."""

    @extend_schema(operation_id="snapshot_impact", responses={200: ImpactSerializer})
    def get(self, request, version: int):
        row = get_object_or_404(
            snapshot_scheduled().defer("content_gzip"), version=version
        )
        return Response(ImpactSerializer(scheduled_impact(row).to_json()).data)


class ExplainView(StrictQueryMixin, APIView):
    """Which policy applies to a request, why, and the bucket keys it would be charged."""

    def known_query_params(self) -> set[str]:
        return {*ExplainQuerySerializer().fields, "format"}

    @extend_schema(
        operation_id="explain",
        parameters=[ExplainQuerySerializer],
        responses={200: ExplanationSerializer},
    )
    def get(self, request):
        query = ExplainQuerySerializer(data=request.query_params)
        query.is_valid(raise_exception=True)
        data = dict(query.validated_data)
        at, limit = data.pop("at", None), data.pop("limit", "")
        result = explain(**data)
        resolution = result.resolution
        rejection = None
        if at is not None:
            if not result.tenant:
                raise ValidationError(
                    {"tenant": "Name the tenant whose 429 to explain."}
                )
            rejection = rejection_explain(
                tenant=result.tenant,
                route=resolution.route.slug if resolution.route else None,
                at=at,
                limit=limit,
            )
        return Response(
            {
                "source": result.source,
                "version": result.version,
                "tenant": result.tenant,
                "tenant_known": result.tenant_known,
                "tier": resolution.tier,
                "route": resolution.route.slug if resolution.route else None,
                "level": resolution.level.value,
                "why": resolution.why(),
                "policy": _policy(resolution.policy),
                "keys": [
                    {"key": k.key, "cost": k.cost, "limit": describe_limit(k.limit)}
                    for k in result.keys
                ],
                "beaten": [_candidate(c) for c in resolution.beaten],
                "expired": [_candidate(c) for c in resolution.expired],
                "rejection": _rejection(rejection) if rejection else None,
            }
        )


def _rejection(why: RejectionExplanation) -> dict:
    return {
        "at": why.at,
        "version": why.version.version,
        "tenant_known": why.tenant_known,
        "policy": why.resolution.policy.describe(),
        "requests": why.requests,
        "seconds": why.seconds,
        "verdicts": [
            {
                "name": v.name,
                "words": v.words,
                "rejected": v.rejected,
                "busiest": v.busiest,
                "busiest_window": v.busiest_window,
                "allowed_then": v.allowed_then,
                "burst_needed": v.burst_needed,
                "rate_needed": v.rate_needed,
                "per_caller": v.per_caller,
            }
            for v in why.verdicts
        ],
        "windows": [asdict(w) for w in why.windows],
    }


def _policy(policy: Policy) -> dict:
    limits = [
        {
            **{k: v for k, v in limit.to_json().items() if k != "name"},
            "description": describe_limit(limit),
            "public_name": public_name(limit),
            "public_description": public_description(limit),
        }
        for limit in policy.limits
    ]
    return {
        "scope": policy.scope,
        "route": policy.route,
        "expires_at": policy.expires_at,
        "description": policy.describe(),
        "limits": limits,
    }


def _candidate(candidate: Candidate) -> dict:
    return {**_policy(candidate.policy), "level": candidate.level.value}


class FleetView(StrictQueryMixin, APIView):
    """Every gateway, the version it runs and its state; how many gateways run each version."""

    @extend_schema(operation_id="fleet_get", responses={200: FleetSerializer})
    def get(self, request):
        active = snapshot_get_active(light=True)
        since = active.activated_at.timestamp() if active else None
        fleet = fleet_status(
            active_version=active.version if active else None, active_since=since
        )
        return Response(
            {
                "active_version": fleet.active_version,
                "gateways": [
                    {**_report(g.report), "state": g.state.value}
                    for g in fleet.gateways
                ],
                "versions": [
                    {"version": v, "gateways": n} for v, n in fleet.versions.items()
                ],
                "rehearsals": [
                    {"version": v, "gateways": ids}
                    for v, ids in fleet.rehearsals.items()
                ],
            }
        )


def _report(report) -> dict:
    fields = {name: getattr(report, name) for name in report.__slots__}
    return {**fields, "seen": datetime.fromtimestamp(report.seen, UTC)}
