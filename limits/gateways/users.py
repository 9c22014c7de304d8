"""Deleting a user: audited, and their API tokens kept as revoked rather than deleted.

:func:`user_delete` is what the admin calls, with the person who deletes. A user
deleted any other way (the ORM, a shell, a script) goes through the same steps from
Django's ``pre_delete`` signal, recorded as the system: the signal is the one hook
that every ORM delete passes, including a queryset's.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from limits.choices import AuditAction
from limits.core.audit import Actor, audit_record
from limits.gateways.tokens import token_revoke

__all__ = ["user_delete", "user_deleting"]

#: Who a deletion outside :func:`user_delete` is recorded as.
ORM_ACTOR = "system (user deleted outside the admin)"


@transaction.atomic
def user_delete(*, user: Any, actor: Actor, reason: str = "") -> None:
    """Revoke ``user``'s API tokens (they stay, without an owner), audit the deletion
    with what the user was, and delete the user."""
    _audit_deletion(user, actor, reason)
    user._sluice_deletion_audited = True
    user.delete()


def user_deleting(sender: Any, instance: Any, **kwargs: Any) -> None:
    """``pre_delete`` receiver for the user model: audit a deletion nobody audited."""
    if getattr(instance, "_sluice_deletion_audited", False):
        return
    with transaction.atomic(using=kwargs.get("using")):
        _audit_deletion(instance, Actor.system(ORM_ACTOR), "")


def _audit_deletion(user: Any, actor: Actor, reason: str) -> None:
    for token in user.api_tokens.filter(revoked_at__isnull=True):
        token_revoke(
            token=token, actor=actor, reason=f"user {user.get_username()} deleted"
        )
    audit_record(
        actor=actor,
        action=AuditAction.DELETE,
        object_type="user",
        object_id=str(user.pk),
        object_repr=user.get_username(),
        before=_user_state(user),
        reason=reason,
    )


def _user_state(user: Any) -> dict[str, Any]:
    return {
        "username": user.get_username(),
        "email": getattr(user, "email", ""),
        "is_active": user.is_active,
        "is_staff": user.is_staff,
        "is_superuser": user.is_superuser,
        "groups": sorted(user.groups.values_list("name", flat=True)),
        "api_tokens": sorted(user.api_tokens.values_list("prefix", flat=True)),
    }
