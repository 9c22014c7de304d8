"""Who may call what: every role reads; product writes; support writes policies and limits.

Finer rules (support only on temporary tenant overrides) live in the services,
which raise PermissionDenied; the exception handler turns that into 403.
"""

from rest_framework import permissions

from limits.choices import Role
from limits.core.roles import user_role

from .authentication import GatewayAuth


class RolePermission(permissions.BasePermission):
    message = "Your role does not allow this."

    def has_permission(self, request, view):
        role = user_role(request.user)
        if role is None:
            return False
        if request.method in permissions.SAFE_METHODS:
            return True
        if role == Role.PRODUCT:
            return True
        return role == Role.SUPPORT and getattr(view, "support_may_write", False)


class AnyRole(permissions.BasePermission):
    """Any signed-in person with a role, whatever the method (their own tokens)."""

    def has_permission(self, request, view):
        return user_role(request.user) is not None


class GatewayOrRole(permissions.BasePermission):
    """A gateway token, or a person with a role: who may read snapshot documents."""

    def has_permission(self, request, view):
        return (
            isinstance(request.auth, GatewayAuth) or user_role(request.user) is not None
        )
