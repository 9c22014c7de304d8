"""The admin page that cancels a scheduled version or moves it to another time
(``limits.publishing.scheduled``)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.core.exceptions import ValidationError
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse

from limits.core.audit import Actor
from limits.models import Snapshot
from limits.publishing.scheduled import snapshot_cancel, snapshot_reschedule

from .fields import PublicNoteCheck, UtcDateTimeField
from .publishing import _page, _require, form_refusal

__all__ = ["scheduled_view"]


class CancelForm(PublicNoteCheck):
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
        help_text="Why: for the audit log.",
    )
    note = forms.CharField(
        required=False,
        label="Public note",
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
        help_text="Public: shown in the changelog and sent to the tenants that were told.",
    )


class MoveForm(forms.Form):
    effective_at = UtcDateTimeField(
        label="New effective time (UTC)",
        help_text="ISO 8601 in UTC, e.g. 2026-12-31T14:00Z. The notice of a lowering "
        "still counts from when it was first published.",
    )
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 2, "cols": 80}),
        help_text="Why: for the audit log.",
    )


def scheduled_view(request, version: int):
    """Cancel, or move, the scheduled version ``version``."""
    _require(request, "limits.publish_snapshot")
    row = get_object_or_404(
        Snapshot.objects.defer("content", "content_gzip"), version=version
    )
    action = request.POST.get("action") if request.method == "POST" else None
    cancel = CancelForm(request.POST if action == "cancel" else None, prefix="cancel")
    move = MoveForm(
        request.POST if action == "move" else None,
        prefix="move",
        initial={"effective_at": row.effective_at},
    )
    form = cancel if action == "cancel" else move
    if action and form.is_valid():
        done = _apply(request, row, action, form)
        if done is not None:
            return redirect(reverse("admin:limits_snapshot_change", args=[done.pk]))
    return _page(
        request,
        "scheduled.html",
        f"Cancel or move version {version}",
        target=row,
        cancel=cancel,
        move=move,
    )


def _apply(request, row: Snapshot, action: str, form: forms.Form) -> Snapshot | None:
    actor = Actor.from_request(request)
    try:
        if action == "cancel":
            done = snapshot_cancel(
                actor=actor, version=row.version, **form.cleaned_data
            )
            messages.success(request, f"Version {row.version} is cancelled.")
            return done
        done = snapshot_reschedule(
            actor=actor, version=row.version, **form.cleaned_data
        )
    except ValidationError as exc:
        form_refusal(form, exc)
        return None
    messages.success(
        request,
        f"Moved: version {done.version} takes effect "
        f"{done.effective_at:%Y-%m-%d %H:%M} UTC instead of version {row.version}.",
    )
    return done
