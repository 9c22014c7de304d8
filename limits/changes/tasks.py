"""Celery tasks of change requests: thin wrappers that call a service."""

from __future__ import annotations

from celery import shared_task

from limits.changes.notify import NOTIFY_TASK, change_request_notify
from limits.changes.overrides import overrides_maintain

__all__ = ["change_request_notify_task", "overrides_maintain_task"]


@shared_task(name="limits.overrides_maintain")
def overrides_maintain_task() -> dict[str, int]:
    """Remind of overrides about to expire and prune expired ones. Run by beat."""
    return overrides_maintain()


#: A webhook receiver that is down gets the event again; the email goes with the
#: first try only.
@shared_task(
    name=NOTIFY_TASK,
    bind=True,
    autoretry_for=(RuntimeError,),
    retry_backoff=True,
    retry_backoff_max=600,
    max_retries=5,
)
def change_request_notify_task(
    self, change_request_id: int, event: str, actor: str, comment: str = ""
) -> dict:
    """Tell the people concerned, and the team's chat tool, of a change request event."""
    return change_request_notify(
        change_request_id=change_request_id,
        event=event,
        actor=actor,
        comment=comment,
        email=self.request.retries == 0,
    )
