"""Discussing a change request: comments, and the reviewer's "request changes" and
"reject", each recorded as a comment, audited, and told to the people concerned
(``limits.changes.notify``).

"Request changes" sends an open request back to draft: its author edits it,
saves and submits it again, and reviewers are told. "Reject" closes it.
Reviewers are the people who may approve (``limits.changes.permissions``).
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from limits.changes.notify import change_request_notify_on_commit
from limits.changes.permissions import require_may_approve
from limits.changes.services import serialize_change_request
from limits.choices import AuditAction
from limits.core.audit import Actor, audit_record, audited_save
from limits.core.chain import chain_lock
from limits.core.roles import user_role
from limits.models import ChangeComment, ChangeRequest, ChangeRequestState, Verdict

__all__ = [
    "change_request_comment",
    "change_request_reject",
    "change_request_request_changes",
]

_EVENTS = {
    Verdict.COMMENT: "change_request.commented",
    Verdict.CHANGES: "change_request.changes_requested",
    Verdict.REJECT: "change_request.rejected",
}


def _body(body: str) -> str:
    if not body.strip():
        raise ValidationError({"body": "Write what you want to say."})
    return body.strip()


def _locked(change_request: ChangeRequest) -> ChangeRequest:
    chain_lock()  # before the request's row lock (limits.core.chain: lock order)
    return ChangeRequest.objects.select_for_update().get(pk=change_request.pk)


def _comment(request: ChangeRequest, actor: Actor, verdict: Verdict, body: str):
    comment = ChangeComment.objects.create(
        change_request=request,
        author=actor.user,
        author_name=actor.username,
        verdict=verdict,
        body=body,
        revision=request.edit_revision,
    )
    audit_record(
        actor=actor,
        action=AuditAction.REVIEW,
        obj=request,
        after={"verdict": verdict.value, "revision": request.edit_revision},
        reason=body,
    )
    change_request_notify_on_commit(
        request, _EVENTS[verdict], actor=actor.username, comment=body
    )
    return comment


@transaction.atomic
def change_request_comment(
    *, change_request: ChangeRequest, actor: Actor, body: str
) -> ChangeComment:
    """Add a comment to a request, open or closed: anyone with a role may."""
    body = _body(body)
    if actor.user is not None and user_role(actor.user) is None:
        raise PermissionDenied("Sign in with a role to comment.")
    return _comment(_locked(change_request), actor, Verdict.COMMENT, body)


def _verdict(change_request, actor, body, *, verdict, state, said) -> ChangeComment:
    body = _body(body)
    request = _locked(change_request)
    if request.state != ChangeRequestState.OPEN:
        raise ValidationError(
            f"Change request #{request.pk} is {request.state}: only an open request "
            f"can be {said}."
        )
    require_may_approve(actor, request)
    before = serialize_change_request(request)
    request.state = state
    if state == ChangeRequestState.REJECTED:
        request.closed_at = timezone.now()
    audited_save(
        request,
        actor=actor,
        before=before,
        reason=f"{said}: {body}",
        serialize=serialize_change_request,
    )
    return _comment(request, actor, verdict, body)


@transaction.atomic
def change_request_request_changes(
    *, change_request: ChangeRequest, actor: Actor, body: str
) -> ChangeComment:
    """A reviewer sends an open request back to its author as a draft, saying what
    to change; the author is told."""
    return _verdict(
        change_request,
        actor,
        body,
        verdict=Verdict.CHANGES,
        state=ChangeRequestState.DRAFT,
        said="sent back for changes",
    )


@transaction.atomic
def change_request_reject(
    *, change_request: ChangeRequest, actor: Actor, body: str
) -> ChangeComment:
    """A reviewer turns an open request down for good, saying why; the author is told."""
    return _verdict(
        change_request,
        actor,
        body,
        verdict=Verdict.REJECT,
        state=ChangeRequestState.REJECTED,
        said="rejected",
    )
