"""Reads of change requests: what a request would do now, and who is waiting on whom.

:func:`change_request_preview` tells, against the active version at this moment,
the diff in words, the tenants reached, whether it lowers anyone (and the
notice it then needs), the conflicts a publish would meet, the problems of the
rules it makes and where the approval rule stands. The admin's page, the API
and ``manage.py change_request show`` all read it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from django.db.models import QuerySet
from django.utils import timezone

from limits.changes.permissions import approvals_counted, may_approve
from limits.changes.publishing import (
    ChangeConflict,
    Conflict,
    RouteClash,
    conflicts_with,
)
from limits.changes.services import active_base, edits_of
from limits.core.audit import Actor
from limits.diff.diffing import EMPTY_RULES, RulesDiff, rules_diff
from limits.models import Approval, ChangeEdit, ChangeRequest, ChangeRequestState
from limits.publishing.approval import approval_reasons
from limits.publishing.notice import NoticePreview, notice_preview
from limits.publishing.problems import problem_text
from limits.rules.documents import Edit, parse_time, rules_with
from limits.traffic.estimate import Impact, impact_estimate
from limits.versions.selectors import snapshot_rules, snapshot_scheduled
from sluice.model import validate_rules

__all__ = [
    "EditView",
    "Preview",
    "change_request_impact",
    "change_request_preview",
    "change_requests_live",
    "change_requests_waiting_for",
    "edits_pending_for",
]

#: Members of documents that snapshots do not carry, as people call them.
_METADATA = {
    "tier": ("name", "description", "position"),
    "tenant": ("name", "contacts"),
    "route": ("description",),
    "policy": ("reason",),
}


@dataclass(frozen=True)
class EditView:
    """One edit with what it changes, in words."""

    edit: Edit
    kind: str  #: new, removed, raised, lowered, changed
    words: list[str]

    @property
    def subject(self) -> str:
        return self.edit.subject

    @property
    def key(self) -> str:
        return self.edit.key


@dataclass(frozen=True)
class Preview:
    """A change request as it stands against the active version now."""

    request: ChangeRequest
    base_version: int | None
    edits: list[EditView]
    diff: RulesDiff
    problems: list[str]
    conflicts: list[Conflict | RouteClash]
    approval_reasons: list[str]
    approvals: list[Approval]  #: those the approval rule counts
    notice: NoticePreview

    @property
    def needs_approval(self) -> bool:
        """Approval is needed and not given yet."""
        return bool(self.approval_reasons) and not self.approvals

    @property
    def publishable(self) -> bool:
        return (
            self.request.is_live
            and not self.needs_approval
            and not self.conflicts
            and not self.problems
            and bool(self.edits)
        )

    def approvable_by(self, actor: Actor) -> bool:
        return (
            self.request.state == ChangeRequestState.OPEN
            and may_approve(actor, self.request) is None
            and not any(a.user_id == actor.user.pk for a in self.approvals)
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "base_version": self.base_version,
            "changes": self.diff.to_json(),
            "problems": self.problems,
            "conflicts": [c.text for c in self.conflicts],
            "approval": {
                "reasons": self.approval_reasons,
                "needed": self.needs_approval,
                "approved_by": [a.user_name for a in self.approvals],
            },
            "notice": {
                "needed": self.notice.needed,
                "lowered": self.notice.lowered,
                "earliest": self.notice.earliest if self.notice.needed else None,
            },
            "publishable": self.publishable,
        }


def change_request_preview(request: ChangeRequest) -> Preview:
    """What ``request`` would do if published now, and what stands in its way; for a
    closed request, what it did (its diff as last stored)."""
    row, base = active_base()
    edits = edits_of(request)
    if not request.is_live and request.summary:
        return _closed(request, edits)
    conflicts = conflicts_with(base, edits, row)
    for scheduled in snapshot_scheduled():
        conflicts += conflicts_with(snapshot_rules(scheduled), edits, scheduled)
    if any(isinstance(conflict, RouteClash) for conflict in conflicts):
        return _clashing(request, row, edits, conflicts)
    rules = rules_with(base, edits)
    diff = rules_diff(base, rules)
    return Preview(
        request=request,
        base_version=row.version if row else None,
        edits=[_view(edit, diff) for edit in edits],
        diff=diff,
        problems=[problem_text(p) for p in validate_rules(rules)],
        conflicts=conflicts,
        approval_reasons=approval_reasons(diff),
        approvals=approvals_counted(request),
        notice=notice_preview(diff=diff, published_at=timezone.now()),
    )


def change_request_impact(request: ChangeRequest) -> Impact | None:
    """Whom ``request``'s edits, published now on the active version, would limit, on
    the traffic of the last days; None once the request is closed (published or
    withdrawn: its version's estimate is on the version)."""
    if not request.is_live:
        return None
    row, base = active_base()
    edits = edits_of(request)
    clashes = [c for c in conflicts_with(base, edits, row) if isinstance(c, RouteClash)]
    if clashes:  # rules gateways could not resolve: nothing to estimate
        raise ChangeConflict(clashes)
    rules = rules_with(base, edits)
    return impact_estimate(old=base, new=rules, diff=rules_diff(base, rules))


def _closed(request: ChangeRequest, edits: list[Edit]) -> Preview:
    diff = RulesDiff.from_json(request.summary)
    return Preview(
        request=request,
        base_version=request.summary_version,
        edits=[_view(edit, diff) for edit in edits],
        diff=diff,
        problems=[],
        conflicts=[],
        approval_reasons=approval_reasons(diff),
        approvals=list(request.approvals.filter(revision=request.edit_revision)),
        notice=notice_preview(diff=diff, published_at=timezone.now()),
    )


def _clashing(request, row, edits: list[Edit], conflicts) -> Preview:
    """A request whose routes collide with the version's: its rules cannot be
    resolved, so nothing is compared; the conflicts say why."""
    diff = rules_diff(EMPTY_RULES, EMPTY_RULES)
    unknown = ["not compared: a route collides (see the conflicts)"]
    return Preview(
        request=request,
        base_version=row.version if row else None,
        edits=[EditView(edit, "changed", unknown) for edit in edits],
        diff=diff,
        problems=[],
        conflicts=conflicts,
        approval_reasons=[],
        approvals=approvals_counted(request),
        notice=notice_preview(diff=diff, published_at=timezone.now()),
    )


def _view(edit: Edit, diff: RulesDiff) -> EditView:
    changes = [
        c for c in diff.changes if (c.subject, c.key) == (edit.subject, edit.key)
    ]
    words = [change.text for change in changes]
    words += _metadata_words(edit) + _end_words(edit)
    kind = changes[0].kind.value if changes else "changed"
    return EditView(edit, kind, words or ["no change gateways see"])


def _end_words(edit: Edit) -> list[str]:
    """When an override ends: a reviewer weighs a raise by how long it lasts."""
    expires = (edit.after or {}).get("expires_at") if edit.subject == "policy" else None
    if not expires:
        return []
    return [f"ends {parse_time(expires):%Y-%m-%d %H:%M} UTC"]


def _metadata_words(edit: Edit) -> list[str]:
    before, after = edit.before or {}, edit.after or {}
    if not edit.before or not edit.after:
        return []
    return [
        f"{edit.subject} {edit.key}: {member} {_shown(before.get(member))} → "
        f"{_shown(after.get(member))}"
        for member in _METADATA[edit.subject]
        if before.get(member) != after.get(member)
    ]


def _shown(value: Any) -> str:
    if isinstance(value, list):
        return ", ".join(map(str, value)) or "none"
    return repr(value) if isinstance(value, str) else str(value)


def change_requests_live() -> QuerySet[ChangeRequest]:
    """Drafts and open requests, newest first."""
    return ChangeRequest.objects.filter(
        state__in=(ChangeRequestState.DRAFT, ChangeRequestState.OPEN)
    ).order_by("-id")


def _needs_approval_stored(request: ChangeRequest) -> bool:
    """The approval rule on the stored summary (no diff computed): for lists."""
    if not request.summary:
        return False
    return bool(approval_reasons(RulesDiff.from_json(request.summary)))


def change_requests_waiting_for(actor: Actor) -> list[ChangeRequest]:
    """Open requests ``actor`` could move on: theirs, and (for product) others'
    that need an approval ``actor`` has not given."""
    waiting = []
    for request in change_requests_live().prefetch_related("approvals"):
        own = actor.user is not None and request.author_id == actor.user.pk
        if own or (
            request.state == ChangeRequestState.OPEN
            and may_approve(actor, request) is None
            and _needs_approval_stored(request)
            and not any(
                a.user_id == actor.user.pk and a.revision == request.edit_revision
                for a in request.approvals.all()
            )
        ):
            waiting.append(request)
    return waiting


def edits_pending_for(subject: str, keys: Iterable[str]) -> list[ChangeEdit]:
    """Edits of live requests that change one of ``keys``."""
    return list(
        ChangeEdit.objects.filter(
            subject=subject,
            key__in=list(keys),
            change_request__state__in=(
                ChangeRequestState.DRAFT,
                ChangeRequestState.OPEN,
            ),
        ).select_related("change_request")
    )
