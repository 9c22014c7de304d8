"""Change requests and rules as code over HTTP: thin views over ``limits.changes`` and
``limits.ascode``.

Support writes here too (its override requests); the services decide what each
role may propose, approve and publish, and answer 403 otherwise.
"""

import django_filters
from django.http import HttpResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import exceptions, mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from api.filters import StrictFilterSet
from api.parsers import BoundedJSONParser, RulesFileParser
from api.permissions import AnyRole
from api.serializers.changes import (
    ChangeRequestInSerializer,
    ChangeRequestPublishedSerializer,
    ChangeRequestPublishSerializer,
    ChangeRequestSerializer,
    ReviewSerializer,
    RulesAppliedSerializer,
    RulesApplySerializer,
    RulesDiffSerializer,
    RulesDocumentSerializer,
    WithdrawSerializer,
)
from api.serializers.impact import ImpactSerializer
from api.views.base import StrictQueryMixin, actor_from
from limits.ascode.services import (
    RulesFileInvalid,
    rules_export,
    rules_file_apply,
    rules_file_diff,
    rules_file_read,
)
from limits.changes.overrides import override_renew
from limits.changes.previews import change_request_impact, change_request_preview
from limits.changes.publishing import change_request_publish
from limits.changes.reviews import (
    change_request_comment,
    change_request_reject,
    change_request_request_changes,
)
from limits.changes.services import (
    EditsInvalid,
    Proposal,
    change_request_approve,
    change_request_from_working_copy,
    change_request_open,
    change_request_rebase,
    change_request_withdraw,
)
from limits.models import (
    ChangeOrigin,
    ChangeRequest,
    ChangeRequestState,
    Policy,
    Verdict,
)


class ChangeRequestFilter(StrictFilterSet):
    state = django_filters.ChoiceFilter(choices=ChangeRequestState.choices)
    author = django_filters.CharFilter(field_name="author_name")
    origin = django_filters.ChoiceFilter(choices=ChangeOrigin.choices)

    class Meta:
        model = ChangeRequest
        fields = ("state", "author", "origin")


def _request_answer(row: ChangeRequest, context: dict, code: int) -> Response:
    """A request as the API shows it, with what it would do now (its preview)."""
    row = ChangeRequest.objects.prefetch_related("edits", "approvals").get(pk=row.pk)
    context = {**context, "preview": change_request_preview(row)}
    return Response(ChangeRequestSerializer(row, context=context).data, status=code)


def _invalid_edits(exc: EditsInvalid) -> serializers.ValidationError:
    """Problems by edit and member: ``{"edits": {"0": {"limits[1].burst": [...]}}}``."""
    by_edit: dict[str, dict[str, list[str]]] = {}
    for index, problem in exc.problems:
        slot = by_edit.setdefault(str(index) if index is not None else "rules", {})
        member = problem.where or "value"
        slot.setdefault(member, []).append(
            problem.message if index is not None else str(problem)
        )
    return serializers.ValidationError({"edits": by_edit})


class ChangeRequestViewSet(
    StrictQueryMixin,
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    mixins.CreateModelMixin,
    viewsets.GenericViewSet,
):
    """Change requests: open one with its edits, read it (with what it would do now),
    approve, publish, rebase or withdraw it."""

    queryset = ChangeRequest.objects.prefetch_related(
        "edits", "approvals", "comments"
    ).order_by("-id")
    serializer_class = ChangeRequestSerializer
    filterset_class = ChangeRequestFilter
    support_may_write = True

    def _answer(self, row: ChangeRequest, code=status.HTTP_200_OK) -> Response:
        row = self.get_queryset().get(pk=row.pk)
        context = {
            **self.get_serializer_context(),
            "preview": change_request_preview(row),
        }
        return Response(ChangeRequestSerializer(row, context=context).data, status=code)

    def retrieve(self, request, *args, **kwargs):
        return self._answer(self.get_object())

    @extend_schema(
        operation_id="change_request_create",
        request=ChangeRequestInSerializer,
        responses={201: ChangeRequestSerializer},
    )
    def create(self, request, *args, **kwargs):
        data = ChangeRequestInSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        proposals = [
            Proposal(edit["object"], edit.get("key", ""), edit["value"])
            for edit in data.validated_data["edits"]
        ]
        try:
            row = change_request_open(
                actor=actor_from(request),
                proposals=proposals,
                title=data.validated_data.get("title", ""),
                reason=data.validated_data.get("reason", ""),
            )
        except EditsInvalid as exc:
            raise _invalid_edits(exc) from None
        return self._answer(row, status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="change_request_approve",
        request=None,
        responses={200: ChangeRequestSerializer},
    )
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        row = self.get_object()
        change_request_approve(change_request=row, actor=actor_from(request))
        return self._answer(row)

    @extend_schema(
        operation_id="change_request_publish",
        request=ChangeRequestPublishSerializer,
        responses={201: ChangeRequestPublishedSerializer},
    )
    @action(detail=True, methods=["post"])
    def publish(self, request, pk=None):
        data = ChangeRequestPublishSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        done = change_request_publish(
            change_request=self.get_object(),
            actor=actor_from(request),
            **data.validated_data,
        )
        row = self.get_queryset().get(pk=done.change_request.pk)
        body = {
            "change_request": ChangeRequestSerializer(
                row, context=self.get_serializer_context()
            ).data,
            "version": done.version.version if done.version else None,
            "carried": [r.version for r in done.carried],
        }
        return Response(body, status=status.HTTP_201_CREATED)

    @extend_schema(
        operation_id="change_request_impact",
        responses={200: ImpactSerializer},
        description="Whom the request's edits would limit, estimated by replaying the "
        "last days of recorded traffic (SLUICE_IMPACT_DAYS) through the new policies. "
        "404 once the request is closed.",
    )
    @action(detail=True, methods=["get"])
    def impact(self, request, pk=None):
        impact = change_request_impact(self.get_object())
        if impact is None:
            raise exceptions.NotFound(
                "This request is closed: its version's estimate is on the version."
            )
        return Response(ImpactSerializer(impact.to_json()).data)

    @extend_schema(
        operation_id="change_request_rebase",
        request=None,
        responses={200: ChangeRequestSerializer},
    )
    @action(detail=True, methods=["post"])
    def rebase(self, request, pk=None):
        row = self.get_object()
        try:
            change_request_rebase(change_request=row, actor=actor_from(request))
        except EditsInvalid as exc:
            raise _invalid_edits(exc) from None
        return self._answer(row)

    @extend_schema(
        operation_id="change_request_withdraw",
        request=WithdrawSerializer,
        responses={200: ChangeRequestSerializer},
    )
    @action(detail=True, methods=["post"])
    def withdraw(self, request, pk=None):
        data = WithdrawSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        row = self.get_object()
        change_request_withdraw(
            change_request=row,
            actor=actor_from(request),
            reason=data.validated_data.get("reason", ""),
        )
        return self._answer(row)

    @extend_schema(
        operation_id="change_request_review",
        request=ReviewSerializer,
        responses={200: ChangeRequestSerializer},
    )
    @action(detail=True, methods=["post"])
    def review(self, request, pk=None):
        """Comment on a request; a reviewer may also request changes or reject it."""
        data = ReviewSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        service = _REVIEWS[data.validated_data["verdict"]]
        row = self.get_object()
        service(
            change_request=row,
            actor=actor_from(request),
            body=data.validated_data["body"],
        )
        return self._answer(row)

    @extend_schema(
        operation_id="change_request_from_working_copy",
        request=None,
        responses={201: ChangeRequestSerializer},
    )
    @action(detail=False, methods=["post"], url_path="from-working-copy")
    def from_working_copy(self, request):
        """Open a request of the working copy's unpublished edits (product)."""
        try:
            row = change_request_from_working_copy(actor=actor_from(request))
        except EditsInvalid as exc:
            raise _invalid_edits(exc) from None
        return self._answer(row, status.HTTP_201_CREATED)


_REVIEWS = {
    Verdict.COMMENT: change_request_comment,
    Verdict.CHANGES: change_request_request_changes,
    Verdict.REJECT: change_request_reject,
}


class OverrideRenewView(APIView):
    """Open a change request extending a published override (one click in the admin)."""

    support_may_write = True

    @extend_schema(
        operation_id="override_renew",
        request=None,
        responses={201: ChangeRequestSerializer},
    )
    def post(self, request, pk: int):
        policy = get_object_or_404(
            Policy.objects.select_related("tenant", "route"), pk=pk
        )
        row = override_renew(policy=policy, actor=actor_from(request))
        return _request_answer(row, {"request": request}, status.HTTP_201_CREATED)


def _read(data) -> object:
    try:
        return rules_file_read(data["document"], name=data.get("name", "rules.yaml"))
    except RulesFileInvalid as exc:
        raise serializers.ValidationError({"document": exc.messages}) from None


class RulesExportView(APIView):
    """The active rules as a rules file (YAML, byte-stable: docs/rules-as-code.md)."""

    @extend_schema(
        operation_id="rules_export",
        responses={
            (200, "application/yaml"): OpenApiResponse(
                OpenApiTypes.OBJECT,
                description="The rules file (docs/rules.schema.json), as YAML.",
            )
        },
    )
    def get(self, request):
        return HttpResponse(
            rules_export(), content_type="application/yaml; charset=utf-8"
        )


class RulesDiffView(APIView):
    """What a rules file changes in the active version: in words, with whom it reaches.

    The body is JSON (``{"document": ...}``) or the file itself (``application/yaml``,
    its name in ``?name=``)."""

    permission_classes = [AnyRole]
    parser_classes = [BoundedJSONParser, RulesFileParser]

    @extend_schema(
        operation_id="rules_diff",
        request=RulesDocumentSerializer,
        responses={200: RulesDiffSerializer},
    )
    def post(self, request):
        data = RulesDocumentSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        return Response(rules_file_diff(_read(data.validated_data)).to_json())


class RulesApplyView(APIView):
    """Open a change request of what a rules file changes; publish it on request.

    The body is JSON, or the file itself (``application/yaml``) with the other
    members as query parameters (``?publish=true&title=...``)."""

    support_may_write = True
    parser_classes = [BoundedJSONParser, RulesFileParser]

    @extend_schema(
        operation_id="rules_apply",
        request=RulesApplySerializer,
        responses={201: RulesAppliedSerializer, 200: RulesAppliedSerializer},
    )
    def post(self, request):
        data = RulesApplySerializer(data=request.data)
        data.is_valid(raise_exception=True)
        given = data.validated_data
        rules_file = _read(given)
        try:
            done = rules_file_apply(
                rules_file,
                actor=actor_from(request),
                title=given.get("title", ""),
                reason=given.get("reason", ""),
                publish=given["publish"],
                effective_at=given.get("effective_at"),
                note=given.get("note", ""),
                emergency_reason=given.get("emergency_reason", ""),
            )
        except RulesFileInvalid as exc:
            raise serializers.ValidationError({"document": exc.messages}) from None
        request_row = done.change_request
        version = done.published.version if done.published else None
        body = {
            "diff": done.diff.to_json(),
            "change_request": ChangeRequestSerializer(
                ChangeRequest.objects.prefetch_related("edits", "approvals").get(
                    pk=request_row.pk
                )
            ).data
            if request_row
            else None,
            "published_version": version.version if version else None,
            "not_published": done.not_published,
        }
        code = status.HTTP_201_CREATED if request_row else status.HTTP_200_OK
        return Response(body, status=code)
