"""Admin pages to publish, compare versions, roll back and explain.

Thin views: forms read the request, services in ``limits`` do the work, and the
templates under ``templates/admin/limits/snapshot/`` extend the admin's own.
"""

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone

from limits.choices import Role
from limits.core.audit import Actor
from limits.core.roles import user_role
from limits.diff.diffing import rules_diff
from limits.models import Route, Snapshot, Tenant
from limits.publishing.notice import notice_preview
from limits.publishing.rollback import snapshot_rollback
from limits.publishing.services import problem_text, snapshot_publish
from limits.rules.compiling import rules_compile, rules_require_routable
from limits.support.rejections import rejection_explain
from limits.traffic.estimate import CAVEATS, impact_estimate
from limits.versions.explain import ExplainSource, explain
from limits.versions.selectors import (
    ACTIVE,
    WORKING_COPY,
    rules_of,
    snapshot_diff,
    snapshot_get_active,
    snapshot_rules,
    snapshot_scheduled,
)
from sluice.model import HTTP_METHODS, validate_rules

from .fields import PublicNoteCheck, UtcDateTimeField, earliest_input

__all__ = [
    "PermissionDenied",
    "diff_view",
    "explain_view",
    "form_refusal",
    "publish_view",
    "rollback_view",
]


class PublishForm(PublicNoteCheck):
    message = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        help_text="What changes and why: customers may read it in the changelog.",
    )
    effective_at = UtcDateTimeField(
        required=False,
        label="Effective at (UTC)",
        help_text="ISO 8601 in UTC, e.g. 2026-12-31T14:00Z. Empty: now, for a change "
        "that lowers nothing; a lowering comes with the earliest time its notice "
        "period allows filled in. Gateways switch on time by themselves.",
    )
    note = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
        help_text="Public: shown in the changelog, webhooks and emails. Editable until it takes effect.",
    )
    emergency_reason = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
        help_text="Only to let a lowering take effect before the notice period ends: why "
        "it cannot wait. The version is marked as an emergency everywhere.",
    )

    def __init__(self, *args, user=None, notice=None, **kwargs):
        """``notice`` (a NoticePreview) pre-fills the earliest time a lowering may
        take effect; the emergency field is the product role's only."""
        super().__init__(*args, **kwargs)
        if notice is not None and notice.needed:
            self.fields["effective_at"].initial = earliest_input(notice.earliest)
        if user is not None and user_role(user) != Role.PRODUCT:
            del self.fields["emergency_reason"]


class RollbackForm(PublishForm):
    message = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}), help_text="Why roll back."
    )


class DiffForm(forms.Form):
    old = forms.ChoiceField(label="from")
    new = forms.ChoiceField(label="to")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        versions = [
            (str(v), f"version {v}")
            for v in Snapshot.objects.order_by("-version").values_list(
                "version", flat=True
            )
        ]
        self.fields["old"].choices = [(ACTIVE, "the active version"), *versions]
        self.fields["new"].choices = [(WORKING_COPY, "the working copy"), *versions]


class ExplainForm(forms.Form):
    source = forms.ChoiceField(
        required=False, choices=ExplainSource.choices, initial=ExplainSource.ACTIVE
    )
    tenant = forms.CharField(
        required=False,
        widget=forms.TextInput(attrs={"list": "tenant-slugs", "autocomplete": "off"}),
        help_text="Tenant slug (pick from the list); empty for anonymous traffic.",
    )
    at = forms.DateTimeField(
        required=False,
        label="at (UTC)",
        input_formats=[
            "%Y-%m-%dT%H:%M:%S%z",
            "%Y-%m-%dT%H:%M:%SZ",
            "%Y-%m-%d %H:%M:%S",
        ],
        widget=forms.TextInput(
            attrs={"placeholder": "2026-12-03T14:03:07Z", "size": 22}
        ),
        help_text="ISO 8601, to the second: explain a 429 at that second with the "
        "version then in force and the traffic before it.",
    )
    limit = forms.CharField(required=False, widget=forms.HiddenInput)
    route = forms.ChoiceField(
        required=False, help_text="A route, or give a method and path."
    )
    method = forms.ChoiceField(
        required=False, choices=[("", "—"), *((m, m) for m in HTTP_METHODS)]
    )
    path = forms.CharField(required=False, help_text="e.g. /v1/orders/42")
    user = forms.CharField(required=False)
    api_key = forms.CharField(required=False, label="API key")
    ip = forms.GenericIPAddressField(required=False, label="IP address")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        routes = Route.objects.order_by("slug").values_list("slug", flat=True)
        self.fields["route"].choices = [("", "—"), *((slug, slug) for slug in routes)]


def _require(request, permission: str) -> None:
    if not request.user.has_perm(permission):
        raise PermissionDenied


def _page(request, template: str, title: str, **context):
    context = {
        **admin.site.each_context(request),
        "opts": Snapshot._meta,
        "title": title,
        "can_publish": request.user.has_perm("limits.publish_snapshot"),
        **context,
    }
    return TemplateResponse(request, f"admin/limits/snapshot/{template}", context)


def form_refusal(form: forms.Form, exc: Exception) -> None:
    """The service's refusal on the form: on the field it names (a notice period on
    the effective time), else above the form."""
    fields = getattr(exc, "error_dict", {})
    if fields and set(fields) <= set(form.fields):
        form.add_error(None, exc)
        return
    for message in getattr(exc, "messages", None) or [str(exc)]:
        form.add_error(None, message)


def publish_view(request):
    """The working copy against the active version, its problems, and the publish form."""
    _require(request, "limits.publish_snapshot")
    working = rules_compile()
    diff = _diff_or_none(rules_of(ACTIVE), working)
    notice = notice_preview(diff=diff, published_at=timezone.now()) if diff else None
    form = PublishForm(request.POST or None, user=request.user, notice=notice)
    if request.method == "POST" and form.is_valid():
        try:
            row = snapshot_publish(
                actor=Actor.from_request(request), **form.cleaned_data
            )
        except ValidationError as exc:
            form_refusal(form, exc)
        else:
            messages.success(request, f"Published version {row.version}.")
            return redirect("admin:limits_snapshot_change", row.pk)
    return _page(
        request,
        "publish.html",
        "Publish the working copy",
        form=form,
        active=snapshot_get_active(light=True),
        scheduled=list(snapshot_scheduled().defer("content", "content_gzip", "diff")),
        problems=[problem_text(p) for p in validate_rules(working)],
        diff=_json_or_none(diff),
        notice=notice,
        impact=(
            impact_estimate(old=rules_of(ACTIVE), new=working, diff=diff)
            if diff
            else None
        ),
        caveats=CAVEATS,
    )


def _diff_or_none(old, working):
    """The diff to the working copy; None when it cannot be resolved (its problems,
    listed on the page, say why)."""
    try:
        return rules_diff(old, rules_require_routable(working))
    except ValidationError:
        return None


def diff_view(request):
    """Any two versions (or the active version and the working copy), compared."""
    _require(request, "limits.view_snapshot")
    form = DiffForm(request.GET or {"old": ACTIVE, "new": WORKING_COPY})
    diff = None
    if form.is_valid():
        old, new = (_ref(form.cleaned_data[side]) for side in ("old", "new"))
        try:
            diff = snapshot_diff(old=old, new=new).to_json()
        except ValidationError as exc:
            form_refusal(form, exc)
    return _page(request, "diff.html", "Compare versions", form=form, diff=diff)


def _json_or_none(diff):
    return diff.to_json() if diff else None


def _ref(value: str) -> int | str:
    return int(value) if value.isdigit() else value


def rollback_view(request, version: int):
    """Confirm, then publish version ``version``'s rules again as a new version."""
    _require(request, "limits.publish_snapshot")
    target = get_object_or_404(Snapshot.objects.defer("content_gzip"), version=version)
    active = rules_of(ACTIVE)
    diff = rules_diff(active, snapshot_rules(target))
    notice = notice_preview(diff=diff, published_at=timezone.now())
    form = RollbackForm(request.POST or None, user=request.user, notice=notice)
    if request.method == "POST" and form.is_valid():
        try:
            row = snapshot_rollback(
                actor=Actor.from_request(request), version=version, **form.cleaned_data
            )
        except ValidationError as exc:
            form_refusal(form, exc)
        else:
            messages.success(
                request, f"Version {row.version} restores version {version}."
            )
            return redirect("admin:limits_snapshot_change", row.pk)
    return _page(
        request,
        "rollback.html",
        f"Roll back to version {version}",
        form=form,
        target=target,
        diff=diff.to_json(),
        notice=notice,
        discarded=_json_or_none(_diff_or_none(active, rules_compile())),
        scheduled=list(snapshot_scheduled().defer("content", "content_gzip", "diff")),
        target_url=reverse("admin:limits_snapshot_change", args=[target.pk]),
    )


def explain_view(request):
    """Which policy a request gets, why, and the keys it would be charged to; with a
    time, why the tenant was rejected then (``limits.support.rejections``)."""
    _require(request, "limits.view_snapshot")
    form = ExplainForm(request.GET or None)
    result = rejection = None
    if form.is_valid():
        data = {
            k: v or None
            for k, v in form.cleaned_data.items()
            if k not in ("source", "at", "limit")
        }
        source = ExplainSource(form.cleaned_data["source"] or ExplainSource.ACTIVE)
        at = form.cleaned_data["at"]
        try:
            result = explain(source=source, **data)
            if at is not None and data["tenant"]:
                rejection = rejection_explain(
                    tenant=data["tenant"],
                    route=result.resolution.route.slug
                    if result.resolution.route
                    else None,
                    at=at,
                    limit=form.cleaned_data["limit"],
                )
        except ValidationError as exc:
            form_refusal(form, exc)
    return _page(
        request,
        "explain.html",
        "Explain a request",
        form=form,
        result=result,
        rejection=rejection,
        tenant_row=Tenant.objects.filter(slug=rejection.tenant).first()
        if rejection
        else None,
        tenants=Tenant.objects.order_by("slug").values_list("slug", flat=True),
    )
