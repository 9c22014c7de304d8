"""The discussion of a change request in the admin: comments, "request changes" and
"reject", posted by one form on the request's page (``limits.changes.reviews``)."""

from __future__ import annotations

from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.shortcuts import get_object_or_404, redirect
from django.urls import reverse

from limits.changes.permissions import may_approve
from limits.changes.reviews import (
    change_request_comment,
    change_request_reject,
    change_request_request_changes,
)
from limits.core.audit import Actor
from limits.models import ChangeRequest, ChangeRequestState

__all__ = ["review_context", "review_view"]

#: The button pressed -> (service, what the page says once done)
_VERDICTS = {
    "comment": (change_request_comment, "Comment added."),
    "changes": (
        change_request_request_changes,
        "Sent back to the author as a draft, with your comment.",
    ),
    "reject": (change_request_reject, "Rejected."),
}


def review_context(request, row: ChangeRequest) -> dict:
    """What the request's page shows of its discussion."""
    actor = Actor.from_request(request)
    return {
        "comments": list(row.comments.all()),
        "can_review": row.state == ChangeRequestState.OPEN
        and may_approve(actor, row) is None,
        "review_url": reverse("admin:limits_changerequest_review", args=[row.pk]),
    }


def review_view(request, pk: int):
    """POST ``body`` with ``verdict`` comment, changes or reject."""
    if request.method != "POST":
        raise PermissionDenied("Use the form of the request's page.")
    row = get_object_or_404(ChangeRequest, pk=pk)
    service, said = _VERDICTS.get(request.POST.get("verdict", ""), _VERDICTS["comment"])
    try:
        service(
            change_request=row,
            actor=Actor.from_request(request),
            body=request.POST.get("body", ""),
        )
    except (ValidationError, PermissionDenied) as exc:
        for message in getattr(exc, "messages", None) or [str(exc)]:
            messages.error(request, message)
    else:
        messages.success(request, said)
    return redirect(reverse("admin:limits_changerequest_change", args=[row.pk]))
