"""The approval rule: which changes need a second product person before they publish.

A change that lowers anyone's limits (``SLUICE_APPROVAL_LOWERING``, on by
default), or that reaches more than ``SLUICE_APPROVAL_TENANTS`` tenants
(25 by default), needs the approval of a product person other than its author.
Tenants the change adds count towards that reach only with
``SLUICE_APPROVAL_NEW_TENANTS``: onboarding lowers no one (a lowering of theirs,
or anyone's, is held by the first rule).
Change requests collect that approval (``limits.changes``); a person publishing
the working copy directly cannot, so such a publish is refused and points to a
change request instead. The system (management commands, Celery) and rollbacks
(which restore a version that was published before) are not held by it.
"""

from __future__ import annotations

from django.conf import settings
from django.core.exceptions import ValidationError

from limits.core.audit import Actor
from limits.diff.diffing import RulesDiff

__all__ = ["ApprovalRequired", "approval_reasons", "require_no_approval"]


class ApprovalRequired(ValidationError):
    """The change needs a second product person's approval, which it does not have."""

    def __init__(self, reasons: list[str], hint: str) -> None:
        self.reasons = reasons
        super().__init__(
            f"This change needs the approval of a second person with the product role: "
            f"{' and '.join(reasons)}. {hint}",
            code="approval_required",
        )


def approval_reasons(diff: RulesDiff) -> list[str]:
    """Why ``diff`` needs approval (empty: it does not), in words."""
    reasons = []
    if settings.SLUICE_APPROVAL_LOWERING and diff.lowers:
        reasons.append("it lowers limits")
    reached_by = set(diff.affected_tenants)
    if not settings.SLUICE_APPROVAL_NEW_TENANTS:
        reached_by -= {
            c.key for c in diff.changes if c.subject == "tenant" and c.kind == "new"
        }
    most, reached = int(settings.SLUICE_APPROVAL_TENANTS), len(reached_by)
    if reached > most:
        plural = "" if reached == 1 else "s"
        reasons.append(f"it reaches {reached} tenant{plural} (more than {most})")
    return reasons


def require_no_approval(actor: Actor, diff: RulesDiff) -> None:
    """Refuse a person's direct publish of a change that needs approval."""
    reasons = approval_reasons(diff) if actor.user is not None else []
    if reasons:
        raise ApprovalRequired(
            reasons,
            "Propose the working copy's edits as a change request (Publish page, or "
            "POST /api/v1/change-requests/from-working-copy) and have it approved.",
        )
