"""Rows every installation needs: the default policy and the role groups.

Migrations create them; ``baseline_ensure`` puts them back where a database was
emptied (``manage.py flush``, transactional tests).
"""

from __future__ import annotations

from typing import Any

from django.apps import apps as global_apps

from limits.core.roles import sync_role_groups

__all__ = ["baseline_ensure", "default_policy_ensure"]


def default_policy_ensure(apps: Any = global_apps) -> None:
    """Create the default policy for all routes, with a strict per-IP limit, if missing."""
    policy_model = apps.get_model("limits", "Policy")
    limit_model = apps.get_model("limits", "Limit")
    policy, created = policy_model.objects.get_or_create(
        scope="default",
        route=None,
        expires_at=None,
        defaults={
            "reason": "Applies when no more specific policy does; never unlimited."
        },
    )
    if created:
        limit_model.objects.create(
            policy=policy, dimension="ip", rate=10, period=1, burst=20
        )


def baseline_ensure() -> None:
    sync_role_groups()
    default_policy_ensure()
