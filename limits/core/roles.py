"""Who may do what: the product, support and viewer roles.

Groups with these names are created by the ``roles`` data migration with the
model permissions of each role. Support may also edit policies, but only
tenant policies, and only as temporary overrides with a reason.
"""

from __future__ import annotations

from typing import Any

from django.apps import apps as global_apps
from django.core.exceptions import PermissionDenied

from limits.choices import Role, ScopeKind

__all__ = ["can_edit_policy", "require_publisher", "require_role", "user_role"]


def user_role(user: Any) -> Role | None:
    """The user's role: product for superusers, else the first matching group."""
    if user is None or not user.is_authenticated or not user.is_active:
        return None
    if user.is_superuser:
        return Role.PRODUCT
    names = set(user.groups.values_list("name", flat=True))
    return next((role for role in Role if role.value in names), None)


def require_role(actor: Any, *roles: Role, to: str) -> None:
    """Raise PermissionDenied unless ``actor`` is the system (commands, Celery) or a
    user with one of ``roles``; the message says who may ``to`` (``"publish"``)."""
    if actor.user is None or user_role(actor.user) in roles:
        return
    names = " and ".join(role.value for role in roles)
    plural = "roles" if len(roles) > 1 else "role"
    raise PermissionDenied(f"Only the {names} {plural} may {to}.")


def require_publisher(actor: Any) -> None:
    """Only product (and superusers) publish; the system (commands, Celery) may too."""
    require_role(actor, Role.PRODUCT, to="publish or roll back")


def can_edit_policy(user: Any, *, scope: str | None) -> bool:
    """Whether ``user`` may create, change or delete a policy of ``scope`` (None: any)."""
    role = user_role(user)
    if role == Role.PRODUCT:
        return True
    return role == Role.SUPPORT and scope in (None, ScopeKind.TENANT)


# Permissions no role gets: the audit log is written by services only.
_NEVER = {"add_auditentry", "change_auditentry", "delete_auditentry"}
# Support also manages how tenants are told (endpoints, resends, private links)
# and its own change requests.
_SUPPORT_EDITS = {
    "policy",
    "limit",
    "webhookendpoint",
    "delivery",
    "tenantlink",
    "changerequest",
}


def role_permissions(role: Role, codenames: set[str]) -> set[str]:
    """Which of the ``limits`` app's permission codenames a role's group holds."""
    allowed = codenames - _NEVER
    if role == Role.PRODUCT:
        return allowed
    views = {c for c in allowed if c.startswith("view_")}
    if role == Role.VIEWER:
        return views
    edits = {c for c in allowed if c.split("_", 1)[1] in _SUPPORT_EDITS}
    return views | edits


def sync_role_groups(apps: Any = None, **_: Any) -> None:
    """Create the role groups and give each its permissions; safe to run again.

    Runs from the ``roles`` data migration and after every ``migrate``, so that a
    model added later is covered without another data migration.
    """
    apps = apps if apps is not None and hasattr(apps, "get_model") else global_apps
    group_model = apps.get_model("auth", "Group")
    permission_model = apps.get_model("auth", "Permission")
    permissions = {
        p.codename: p
        for p in permission_model.objects.filter(content_type__app_label="limits")
    }
    for role in Role:
        group, _ = group_model.objects.get_or_create(name=role.value)
        wanted = role_permissions(role, set(permissions))
        group.permissions.set([permissions[codename] for codename in wanted])
