"""Change requests in the admin: the list (filter "waiting for you"), each request's
page with what it would do now, and its verbs as admin views (submit, approve,
publish, rebase, withdraw, drop an edit), plus override renewal and a request
made of the working copy's unpublished edits.

Thin views: the services of ``limits.changes`` decide and audit; the templates
under ``templates/admin/limits/changerequest/`` extend the admin's own.
"""

from __future__ import annotations

from django import forms
from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import get_object_or_404, redirect
from django.template.response import TemplateResponse
from django.urls import path, re_path, reverse
from django.utils.html import format_html

from limits.changes.overrides import override_renew
from limits.changes.permissions import may_publish
from limits.changes.previews import (
    change_request_impact,
    change_request_preview,
    change_requests_waiting_for,
)
from limits.changes.publishing import ChangeConflict, change_request_publish
from limits.changes.services import (
    change_request_approve,
    change_request_discard_edit,
    change_request_from_working_copy,
    change_request_rebase,
    change_request_submit,
    change_request_update,
    change_request_withdraw,
)
from limits.choices import Role
from limits.core.audit import Actor
from limits.core.roles import user_role
from limits.diff.diffing import RulesDiff
from limits.models import ChangeRequest, ChangeRequestState, Policy
from limits.publishing.approval import approval_reasons
from limits.traffic.estimate import CAVEATS

from . import reviews
from .publishing import PublishForm, form_refusal

__all__ = ["ChangeRequestAdmin"]

_VERBS = {
    "submit": (
        change_request_submit,
        "Submitted: it is open for review and publishing.",
    ),
    "approve": (change_request_approve, "Approved."),
    "rebase": (change_request_rebase, "Rebased on the active version."),
    "withdraw": (change_request_withdraw, "Withdrawn."),
}


class ChangeRequestPublishForm(PublishForm):
    """When and how a request takes effect; its title is the version's message."""

    message = None


class WaitingFilter(admin.SimpleListFilter):
    title = "waiting"
    parameter_name = "waiting"

    def lookups(self, request, model_admin):
        return [("you", "for you"), ("live", "drafts and open")]

    def queryset(self, request, queryset):
        if self.value() == "you":
            pks = [
                r.pk for r in change_requests_waiting_for(Actor.from_request(request))
            ]
            return queryset.filter(pk__in=pks)
        if self.value() == "live":
            return queryset.filter(
                state__in=(ChangeRequestState.DRAFT, ChangeRequestState.OPEN)
            )
        return queryset


class ChangeRequestForm(forms.ModelForm):
    class Meta:
        model = ChangeRequest
        fields = ("title", "reason")
        widgets = {"reason": forms.Textarea(attrs={"rows": 3, "cols": 80})}


@admin.register(ChangeRequest)
class ChangeRequestAdmin(admin.ModelAdmin):
    """Requests are made by the rule pages, the API and rules files; here they are
    read, reviewed, approved and published."""

    form = ChangeRequestForm
    fields = ("title", "reason")
    list_display = (
        "number",
        "title",
        "state_text",
        "author_name",
        "impact",
        "approval",
    )
    list_display_links = ("number", "title")
    list_filter = (WaitingFilter, "state", "origin")
    search_fields = ("title", "reason", "author_name")
    change_form_template = "admin/limits/changerequest/change_form.html"
    change_list_template = "admin/limits/changerequest/change_list.html"

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        if not super().has_change_permission(request, obj):
            return False
        return obj is None or (obj.is_live and self._owns(request, obj))

    @staticmethod
    def _owns(request, obj: ChangeRequest) -> bool:
        return (
            obj.author_id == request.user.pk or user_role(request.user) == Role.PRODUCT
        )

    def save_model(self, request, obj, form, change):
        change_request_update(
            change_request=obj,
            actor=Actor.from_request(request),
            title=form.cleaned_data["title"],
            reason=form.cleaned_data["reason"],
        )

    def log_change(self, request, obj, message):
        return None  # audited by the service

    def response_change(self, request, obj):
        """Stay on the request's page; "Save and submit for review" submits what was
        just saved (the typed title and reason go with it)."""
        if "_submit" in request.POST:
            try:
                change_request_submit(
                    change_request=obj, actor=Actor.from_request(request)
                )
            except (ValidationError, PermissionDenied) as exc:
                self._refused(request, exc)
            else:
                messages.success(request, "Saved and submitted for review.")
                return self._back(obj)
        else:
            messages.success(request, "Saved.")
        return self._back(obj)

    def change_view(self, request, object_id, form_url="", extra_context=None):
        row = get_object_or_404(ChangeRequest, pk=object_id)
        preview = change_request_preview(row)
        actor = Actor.from_request(request)
        owner = self._owns(request, row)
        extra = {
            "preview": preview,
            "diff": preview.diff.to_json(),
            "notice": preview.notice,
            "owner": owner,
            "can_submit": owner and row.state == ChangeRequestState.DRAFT,
            "can_approve": preview.approvable_by(actor),
            "can_publish": row.is_live
            and may_publish(actor, row, [(v.subject, v.key) for v in preview.edits])
            is None,
            "publish_url": reverse("admin:limits_changerequest_publish", args=[row.pk]),
            "title": f"Change request #{row.pk}",
            **_impact_context(row),
            **reviews.review_context(request, row),
        }
        return super().change_view(
            request, object_id, form_url, {**extra, **(extra_context or {})}
        )

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path(
                "<int:pk>/publish/",
                view(self.publish_view),
                name="limits_changerequest_publish",
            ),
            path(
                "<int:pk>/review/",
                view(reviews.review_view),
                name="limits_changerequest_review",
            ),
            path(
                "<int:pk>/discard/",
                view(self.discard_view),
                name="limits_changerequest_discard",
            ),
            re_path(
                rf"^(?P<pk>\d+)/(?P<verb>{'|'.join(_VERBS)})/$",
                view(self.verb_view),
                name="limits_changerequest_verb",
            ),
            path(
                "renew/<int:policy>/",
                view(self.renew_view),
                name="limits_changerequest_renew",
            ),
            path(
                "from-working-copy/",
                view(self.from_working_copy_view),
                name="limits_changerequest_from_working_copy",
            ),
            *super().get_urls(),
        ]

    def _back(self, row: ChangeRequest):
        return redirect(reverse("admin:limits_changerequest_change", args=[row.pk]))

    def _refused(self, request, exc: Exception) -> None:
        for message in getattr(exc, "messages", None) or [str(exc)]:
            messages.error(request, message)

    def _require_view(self, request) -> None:
        if not self.has_view_permission(request):
            raise PermissionDenied

    @staticmethod
    def _post_only(request) -> None:
        if request.method != "POST":
            raise PermissionDenied("Use the buttons of the request's page.")

    def verb_view(self, request, pk: int, verb: str):
        self._require_view(request)
        self._post_only(request)
        if verb not in _VERBS:
            raise PermissionDenied
        row = get_object_or_404(ChangeRequest, pk=pk)
        service, said = _VERBS[verb]
        try:
            service(change_request=row, actor=Actor.from_request(request))
        except (ValidationError, PermissionDenied) as exc:
            self._refused(request, exc)
        else:
            messages.success(request, said)
        return self._back(row)

    def discard_view(self, request, pk: int):
        self._require_view(request)
        self._post_only(request)
        row = get_object_or_404(ChangeRequest, pk=pk)
        try:
            change_request_discard_edit(
                change_request=row,
                subject=request.POST.get("subject", ""),
                key=request.POST.get("key", ""),
                actor=Actor.from_request(request),
            )
        except (ValidationError, PermissionDenied) as exc:
            self._refused(request, exc)
        else:
            messages.success(request, "Edit dropped.")
        return self._back(row)

    def publish_view(self, request, pk: int):
        """The request against the active version, and the form to publish it."""
        self._require_view(request)
        row = get_object_or_404(ChangeRequest, pk=pk)
        preview = change_request_preview(row)
        form = ChangeRequestPublishForm(
            request.POST or None, user=request.user, notice=preview.notice
        )
        if request.method == "POST" and form.is_valid():
            try:
                done = change_request_publish(
                    change_request=row,
                    actor=Actor.from_request(request),
                    **form.cleaned_data,
                )
            except (ValidationError, PermissionDenied) as exc:
                form_refusal(form, exc)
            else:
                messages.success(request, _published_words(done))
                return self._back(row)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"Publish change request #{row.pk}",
            "original": row,
            "preview": preview,
            "diff": preview.diff.to_json(),
            "notice": preview.notice,
            "form": form,
            **_impact_context(row),
        }
        return TemplateResponse(
            request, "admin/limits/changerequest/publish.html", context
        )

    def renew_view(self, request, policy: int):
        """One click: a change request renewing the override, ready to publish."""
        self._post_only(request)
        override = get_object_or_404(
            Policy.objects.select_related("tenant", "route"), pk=policy
        )
        try:
            row = override_renew(policy=override, actor=Actor.from_request(request))
        except (ValidationError, PermissionDenied) as exc:
            self._refused(request, exc)
            return redirect("admin:index")
        messages.success(
            request, f"Change request #{row.pk} renews {override}: publish it."
        )
        return self._back(row)

    def from_working_copy_view(self, request):
        self._post_only(request)
        try:
            row = change_request_from_working_copy(actor=Actor.from_request(request))
        except (ValidationError, PermissionDenied) as exc:
            self._refused(request, exc)
            return redirect("admin:limits_snapshot_publish")
        return self._back(row)

    @admin.display(description="#", ordering="id")
    def number(self, row):
        return f"#{row.pk}"

    @admin.display(description="state", ordering="state")
    def state_text(self, row):
        return row.get_state_display().split(":")[0]

    @admin.display(description="impact")
    def impact(self, row):
        said = f"{row.reach} tenant{'s' if row.reach != 1 else ''}"
        if row.lowers:
            return format_html(
                '<span class="sluice-kind lowered">lowers</span> {}', said
            )
        return said

    @admin.display(description="approval")
    def approval(self, row):
        reasons = _stored_reasons(row)
        if not reasons:
            return "not needed"
        approved = [
            a.user_name for a in row.approvals.all() if a.revision == row.edit_revision
        ]
        return f"approved by {', '.join(approved)}" if approved else "needed"

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("approvals")


def _stored_reasons(row: ChangeRequest) -> list[str]:
    return approval_reasons(RulesDiff.from_json(row.summary)) if row.summary else []


def _impact_context(row: ChangeRequest) -> dict:
    """What ``snapshot/_impact.html`` shows: whom the request would limit."""
    try:
        impact = change_request_impact(row)
    except ChangeConflict:  # routes gateways could not resolve: the conflicts say so
        impact = None
    return {"impact": impact, "caveats": CAVEATS}


def _published_words(done) -> str:
    if done.version is None:
        return "Published: the rule tables changed; nothing gateways see did."
    said = f"Published as version {done.version.version}"
    if done.version.activated_at is None:
        said += f", taking effect {done.version.effective_at:%Y-%m-%d %H:%M} UTC"
    if done.carried:
        carried = ", ".join(str(row.version) for row in done.carried)
        said += f"; carried into the scheduled version(s) as {carried}"
    return said + "."
