"""Telling the team about change requests: an email to the people concerned, and a
Standard Webhooks event to the team's chat tool.

Services call :func:`change_request_notify_on_commit` inside their transaction;
the task (``limits.changes.tasks``) runs :func:`change_request_notify` once the
change is committed, so a refused or rolled-back action tells no one.

* the author hears of comments by others, "request changes", rejections and
  approvals;
* reviewers (product people other than the author) hear of a request submitted
  for review, and of the author's answers to their comments.

The webhook goes to ``SLUICE_TEAM_WEBHOOK_URL`` (none: no event), signed with
``SLUICE_TEAM_WEBHOOK_SECRET`` like tenants' webhooks
(``limits.announcements.signing``). Its body has a ``text`` member, which
Slack-compatible incoming webhooks show as the message.
"""

from __future__ import annotations

import json
import uuid

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.mail import send_mail
from django.db.models import Q
from django.urls import reverse
from django.utils import timezone

from limits.announcements.signing import signature_headers
from limits.announcements.webhooks import PostResult, webhook_post
from limits.choices import Role
from limits.core.jobs import enqueue_on_commit
from limits.models import ChangeRequest

__all__ = [
    "EVENTS",
    "NOTIFY_TASK",
    "change_request_notify",
    "change_request_notify_on_commit",
    "team_webhook_post",
]

NOTIFY_TASK = "limits.change_request_notify"

#: event type -> (who hears of it, what it says)
EVENTS = {
    "change_request.submitted": ("reviewers", "submitted for review"),
    "change_request.commented": ("others", "commented on"),
    "change_request.changes_requested": ("author", "requested changes to"),
    "change_request.rejected": ("author", "rejected"),
    "change_request.approved": ("author", "approved"),
}


def change_request_notify_on_commit(
    request: ChangeRequest, event: str, *, actor: str, comment: str = ""
) -> None:
    """Queue the notifications of ``event`` for when the transaction commits."""
    if event not in EVENTS:
        raise ValueError(f"unknown change request event {event!r}")
    enqueue_on_commit(NOTIFY_TASK, request.pk, event, actor, comment)


def _reviewers(request: ChangeRequest) -> list[str]:
    users = (
        get_user_model()
        .objects.filter(Q(groups__name=Role.PRODUCT) | Q(is_superuser=True))
        .filter(is_active=True)
        .exclude(pk=request.author_id)
    )
    return sorted({u.email for u in users if u.email})


def _recipients(request: ChangeRequest, event: str, actor: str) -> list[str]:
    """Whom ``event`` by ``actor`` concerns: never ``actor`` themself."""
    who = EVENTS[event][0]
    author = request.author
    if who == "others":
        who = "reviewers" if author and author.username == actor else "author"
    if who == "author":
        found = [author.email] if author and author.email else []
    else:
        found = _reviewers(request)
    mine = (
        get_user_model().objects.filter(username=actor).values_list("email", flat=True)
    )
    return [address for address in found if address not in set(mine)]


def _payload(request: ChangeRequest, event: str, actor: str, comment: str) -> dict:
    url = settings.SLUICE_PUBLIC_URL.rstrip("/") + reverse(
        "admin:limits_changerequest_change", args=[request.pk]
    )
    said = f"{actor} {EVENTS[event][1]} change request #{request.pk}: {request.title}"
    return {
        "type": event,
        "created_at": timezone.now().isoformat(),
        "actor": actor,
        "comment": comment,
        "change_request": {
            "id": request.pk,
            "title": request.title,
            "state": request.state,
            "author": request.author_name,
            "url": url,
        },
        "text": f"{said}{f': {comment}' if comment else ''} <{url}>",
    }


def change_request_notify(
    *,
    change_request_id: int,
    event: str,
    actor: str,
    comment: str = "",
    email: bool = True,
) -> dict:
    """Send the email (unless ``email`` is false: a retry) and the team webhook of
    ``event``; return what was sent (``{"emailed": [...], "webhook": status or
    None}``). Raises when the webhook receiver did not take it, so that the task
    tries again."""
    request = ChangeRequest.objects.select_related("author").get(pk=change_request_id)
    payload = _payload(request, event, actor, comment)
    recipients = _recipients(request, event, actor) if email else []
    if recipients:
        send_mail(
            f"[{settings.SLUICE_BRAND}] {payload['text'].split(' <')[0][:150]}",
            f"{payload['text']}\n",
            settings.DEFAULT_FROM_EMAIL,
            recipients,
        )
    result = team_webhook_post(payload)
    if result is not None and not result.ok:
        raise RuntimeError(f"team webhook: {result.error or result.status_code}")
    return {"emailed": recipients, "webhook": result.status_code if result else None}


def team_webhook_post(payload: dict) -> PostResult | None:
    """POST ``payload`` to the team's webhook, signed; None when none is set."""
    url = settings.SLUICE_TEAM_WEBHOOK_URL
    if not url:
        return None
    message_id = f"msg_{uuid.uuid4().hex}"
    body = json.dumps({"id": message_id, **payload}, sort_keys=True).encode()
    headers = {"Content-Type": "application/json", "Sluice-Event": payload["type"]}
    secret = settings.SLUICE_TEAM_WEBHOOK_SECRET
    if secret:
        headers |= signature_headers(
            secret=secret,
            message_id=message_id,
            body=body,
            timestamp=int(timezone.now().timestamp()),
        )
    return webhook_post(
        url=url, body=body, headers=headers, timeout=settings.SLUICE_WEBHOOK_TIMEOUT
    )
