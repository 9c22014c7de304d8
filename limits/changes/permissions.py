"""Who may propose, approve and publish which change requests.

* **propose**: product anything; support temporary tenant overrides only (adding,
  changing, renewing or removing them); viewers nothing. The system may do all.
* **approve**: a product person other than the author (nobody approves their own).
* **publish**: product any request; support its own requests when every edit is
  an override. Either way the approval rule must be met first.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.core.exceptions import PermissionDenied

from limits.choices import Role
from limits.core.audit import Actor
from limits.core.roles import user_role
from limits.models import Approval, ChangeRequest

__all__ = [
    "approvals_counted",
    "is_override_key",
    "may_approve",
    "may_publish",
    "require_may_approve",
    "require_may_propose",
    "require_may_publish",
]


def is_override_key(subject: str, key: str) -> bool:
    """Whether an edit's object is a temporary tenant override (``tenant:x/route~``)."""
    return subject == "policy" and key.startswith("tenant:") and key.endswith("~")


def require_may_propose(actor: Actor, objects: Iterable[tuple[str, str]]) -> None:
    """PermissionDenied unless ``actor`` may propose edits of ``objects`` (subject, key)."""
    if actor.user is None:
        return
    role = user_role(actor.user)
    if role == Role.PRODUCT:
        return
    if role == Role.SUPPORT:
        others = [f"{s} {k}" for s, k in objects if not is_override_key(s, k)]
        if not others:
            return
        raise PermissionDenied(
            "Support proposes temporary tenant overrides only (with a reason and an "
            f"expiry), not: {', '.join(others[:5])}."
        )
    raise PermissionDenied("Your role may not propose rule changes.")


def may_approve(actor: Actor, change_request: ChangeRequest) -> str | None:
    """None if ``actor`` may approve; else why not, in words."""
    if actor.user is None:
        return "Approvals come from people: sign in as a product person."
    if user_role(actor.user) != Role.PRODUCT:
        return "Only the product role approves change requests."
    if change_request.author_id == actor.user.pk:
        return "Nobody approves their own change request: ask another product person."
    return None


def require_may_approve(actor: Actor, change_request: ChangeRequest) -> None:
    why = may_approve(actor, change_request)
    if why:
        raise PermissionDenied(why)


def may_publish(
    actor: Actor, change_request: ChangeRequest, objects: Iterable[tuple[str, str]]
) -> str | None:
    """None if ``actor``'s role may publish ``change_request``; else why not. (The
    approval rule is checked apart, against the diff at publish time.)"""
    if actor.user is None:
        return None
    role = user_role(actor.user)
    if role == Role.PRODUCT:
        return None
    if role == Role.SUPPORT:
        if change_request.author_id != actor.user.pk:
            return "Support publishes its own change requests only."
        if all(is_override_key(s, k) for s, k in objects):
            return None
        return "Support publishes override requests only; product publishes the others."
    return "Your role may not publish rule changes."


def require_may_publish(
    actor: Actor, change_request: ChangeRequest, objects: Iterable[tuple[str, str]]
) -> None:
    why = may_publish(actor, change_request, objects)
    if why:
        raise PermissionDenied(why)


def approvals_counted(change_request: ChangeRequest) -> list[Approval]:
    """Approvals of the request's current edits by product people other than its
    author: the ones the approval rule counts."""
    rows = change_request.approvals.filter(
        revision=change_request.edit_revision
    ).select_related("user")
    return [
        row
        for row in rows
        if row.user is not None
        and row.user_id != change_request.author_id
        and user_role(row.user) == Role.PRODUCT
    ]
