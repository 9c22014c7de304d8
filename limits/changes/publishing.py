"""Publishing a change request: exactly its edits, on top of the version in force.

Under the publishing lock (``limits.publishing.services``), for a request that
takes effect at ``T`` (now by default):

1. versions already due are activated, so "the version in force" is current;
2. the **target** is the version in force at ``T`` (the active one for "now");
   every edit must find its object there as it was when the edit was made
   (its ``before``), or the publish is refused with the conflicts in words;
3. the target's rules with the edits applied are validated and stored as the
   next version by ``snapshot_store`` (notice rule, announcement, audit), after
   the approval rule allowed the diff;
4. each version scheduled to take effect at ``T`` or later is **re-issued** with
   the same edits carried in (it must not touch the request's objects), so that
   a pending lowering neither swallows nor undoes the request, and the request
   does not cancel it;
5. the edits are written into the rule tables (the working copy), audited.

A request whose edits change nothing gateways see (a tenant's name, a reason)
publishes no version: step 5 alone.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial

from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from limits.changes.permissions import approvals_counted, require_may_publish
from limits.changes.services import (
    edits_known,
    edits_of,
    edits_recheck,
    serialize_change_request,
)
from limits.choices import Role
from limits.core.audit import Actor, audited_save
from limits.core.chain import chain_lock
from limits.core.collector import collector_paused
from limits.core.roles import require_role
from limits.diff.diffing import EMPTY_RULES, RulesDiff
from limits.models import ChangeRequest, ChangeRequestState, Snapshot
from limits.publishing.approval import ApprovalRequired, approval_reasons
from limits.publishing.services import (
    activate_due,
    publish_times,
    publishing_lock,
    snapshot_store,
    version_in_force,
)
from limits.rules.compiling import route_table_error
from limits.rules.documents import Edit, rules_value, rules_with, value_in
from limits.rules.records import documents_write
from limits.versions.selectors import snapshot_rules
from sluice import model as sluice_model
from sluice.model import parse_concurrency, parse_limit, policy_ref

__all__ = [
    "ChangeConflict",
    "Conflict",
    "KnownDiff",
    "Published",
    "RouteClash",
    "change_request_publish",
    "conflicts_with",
]


@dataclass(frozen=True)
class Conflict:
    """An object a request edits that is not, in ``version``, what the edit was made
    against."""

    edit: Edit
    version: Snapshot | None
    found: object  #: what ``version`` holds for it (``rules_value``'s form)

    @property
    def text(self) -> str:
        what = _object_words(self.edit)
        then = _value_words(
            self.edit.subject,
            rules_value(self.edit.subject, self.edit.before, self.edit.key),
        )
        now = _value_words(self.edit.subject, self.found)
        if self.version is not None and self.version.activated_at is None:
            when = f"{self.version.effective_at:%Y-%m-%d %H:%M} UTC"
            return (
                f"{what}: version {self.version.version}, scheduled for {when}, "
                f"also changes it ({then} → {now}). Publish this request once that "
                "version has taken effect, then rebase it."
            )
        version = f"version {self.version.version}" if self.version else "no version"
        return (
            f"{what} changed since this request was made: it was {then}, {version} "
            f"has {now}. Rebase the request to put its edits on what is there now, "
            "or withdraw it."
        )


@dataclass(frozen=True)
class RouteClash:
    """The request's routes and those of ``version`` claim one method and path
    (another request took it first): gateways could not tell them apart."""

    problem: str  #: ``GET /v1/x is claimed by both 'a' and 'b'``
    version: Snapshot | None

    @property
    def text(self) -> str:
        version = f"version {self.version.version}" if self.version else "no version"
        return (
            f"Route collision with {version}: {self.problem}. Change this request's "
            "route (its methods or path), or withdraw it."
        )


class ChangeConflict(ValidationError):
    """The rules under a change request changed where it edits them."""

    def __init__(self, conflicts: Sequence[Conflict | RouteClash]) -> None:
        self.conflicts = list(conflicts)
        super().__init__([c.text for c in conflicts], code="conflict")


@dataclass(frozen=True)
class Published:
    """What publishing a request made: its version (None when nothing gateways see
    changed) and the scheduled versions re-issued with its edits."""

    change_request: ChangeRequest
    version: Snapshot | None
    carried: list[Snapshot] = field(default_factory=list)


def _object_words(edit: Edit) -> str:
    if edit.subject != "policy":
        return f"{edit.subject} {edit.key}"
    scope, _, route = edit.key.rstrip("~").partition("/")
    value = sluice_model.Policy(
        scope=scope,
        route=route,
        limits=(),
        expires_at=timezone.now() if edit.key.endswith("~") else None,
    )
    return f"policy {value.describe()}"


def _value_words(subject: str, value) -> str:
    """What an object holds, the way people say it."""
    if value is None:
        return "absent"
    if subject == "tier":
        return f"named {value!r}"
    if subject == "tenant":
        return f"on tier {value}"
    if subject == "route":
        methods = ", ".join(value["methods"])
        return f"{methods} {value['path']}, cost {value['cost']}"
    limits = [parse_limit(v) for v in value["limits"]]
    limits += [parse_concurrency(v) for v in value.get("concurrency", [])]
    said = "; ".join(sluice_model.describe_limit(v) for v in limits)
    expires = value["expires_at"]
    return said + (f", expiring {expires}" if expires else "")


def conflicts_with(
    rules: sluice_model.Rules, edits: Sequence[Edit], version: Snapshot | None
) -> list[Conflict | RouteClash]:
    """The edits whose object ``rules`` (of ``version``) hold otherwise than the edit's
    ``before``; else a route of the edits colliding with one of ``rules``."""
    found: list[Conflict | RouteClash] = []
    policies = {policy_ref(p): p for p in rules.policies}
    for edit in edits:
        there = value_in(rules, edit.subject, edit.key, policies=policies)
        if there != rules_value(edit.subject, edit.before, edit.key):
            found.append(Conflict(edit, version, there))
    if found or not any(edit.subject == "route" for edit in edits):
        return found
    problem = route_table_error(rules_with(rules, edits).routes.values())
    return [RouteClash(problem, version)] if problem else []


def _scheduled_from(effective: datetime) -> list[Snapshot]:
    """Versions waiting to take effect at ``effective`` or later, in the order they will."""
    return list(
        Snapshot.objects.filter(
            activated_at__isnull=True,
            superseded_at__isnull=True,
            effective_at__gte=effective,
        ).order_by("effective_at", "version")
    )


def _require_approved(request: ChangeRequest, diff) -> None:
    reasons = approval_reasons(diff)
    if reasons and not approvals_counted(request):
        step = (
            "Submit it, then ask"
            if request.state == ChangeRequestState.DRAFT
            else "Ask"
        )
        raise ApprovalRequired(
            reasons,
            f"{step} another product person to approve change request #{request.pk}.",
        )


@collector_paused()
@transaction.atomic
def change_request_publish(
    *,
    change_request: ChangeRequest,
    actor: Actor,
    effective_at: datetime | None = None,
    note: str = "",
    emergency_reason: str = "",
    known_diff: KnownDiff | None = None,
) -> Published:
    """Publish ``change_request`` (a draft or an open request) as the next version.

    Takes effect now, or at ``effective_at``; ``note`` and ``emergency_reason`` as for
    any publish (``limits.publishing.notice``). ``known_diff``: the diff of the same
    change the caller computed (a rules file's), stored with the version when it
    is against the version this one replaces and gives the same rules. Raises ChangeConflict,
    ApprovalRequired, NoticePeriodTooShort, InvalidRules, PermissionDenied, and
    ValidationError for a request that is closed or empty.
    """
    chain_lock()  # before the request's row lock (limits.core.chain: lock order)
    # not its summary: the diff's JSON (120,000 changes for a large file) is not
    # needed here, and a row saved with it deferred does not write it back
    request = (
        ChangeRequest.objects.select_for_update()
        .defer("summary")
        .get(pk=change_request.pk)
    )
    if not request.is_live:
        raise ValidationError(
            f"Change request #{request.pk} is {request.state} already."
        )
    edits_known(request, seen=change_request)
    edits = edits_of(request)
    if not edits:
        raise ValidationError("This change request has no edits.")
    edits_recheck(edits)
    require_may_publish(actor, request, [(e.subject, e.key) for e in edits])
    if emergency_reason.strip():  # skipping the notice is the product role's call
        require_role(actor, Role.PRODUCT, to="publish as an emergency")
    publishing_lock(rules=True)
    now = timezone.now()
    activate_due(actor=actor, now=now)
    _, effective = publish_times(now, effective_at)
    target = version_in_force(effective)
    base = snapshot_rules(target) if target else EMPTY_RULES
    later = _scheduled_from(effective)
    conflicts = conflicts_with(base, edits, target)
    for row in later:
        conflicts += conflicts_with(snapshot_rules(row), edits, row)
    if conflicts:
        raise ChangeConflict(conflicts)
    rules = rules_with(base, edits)
    version, carried = None, []
    base_digest = target.rules_digest if target else EMPTY_RULES.digest()
    if rules.digest() != base_digest:  # the stored digest: no 6 MB to serialize again
        version = snapshot_store(
            actor=actor,
            rules=rules,
            message=f"{request.title} (change request #{request.pk})",
            effective_at=effective_at,
            note=note,
            emergency_reason=emergency_reason,
            keep_scheduled=True,
            # the diff it computes anyway (a first version limits what had no
            # limits: no one to ask)
            check=partial(_require_approved, request),
            known_diff=_reusable(known_diff, target, rules),
        )
        carried = [_carry(row, edits, actor, request) for row in later]
    reason = f"change request #{request.pk}: {request.title}"
    documents_write(edits=edits, actor=actor, reason=reason)
    _close(request, actor, version, carried)
    return Published(request, version, carried)


@dataclass(frozen=True)
class KnownDiff:
    """A diff a caller computed: of the rules with ``digest`` against ``version``."""

    version: int | None  #: None: against no version (a first publish)
    digest: str
    diff: RulesDiff


def _reusable(
    known: KnownDiff | None, target: Snapshot | None, rules: sluice_model.Rules
) -> RulesDiff | None:
    """``known``'s diff when it is the one of ``rules`` against ``target``."""
    if known is None or known.version != (target.version if target else None):
        return None
    return known.diff if known.digest == rules.digest() else None


def _carry(
    row: Snapshot, edits: Sequence[Edit], actor: Actor, request: ChangeRequest
) -> Snapshot:
    """Re-issue the scheduled version ``row`` with ``edits`` carried in."""
    announcement = row.announcement
    return snapshot_store(
        actor=actor,
        rules=rules_with(snapshot_rules(row), edits),
        message=row.message,  # the carry is recorded once: Announcement.carries
        effective_at=row.effective_at,
        note=announcement.note,
        emergency_reason=announcement.emergency_reason,
        replaces=row,
    )


def _close(request, actor, version, carried) -> None:
    before = serialize_change_request(request)
    request.state = ChangeRequestState.PUBLISHED
    request.closed_at = timezone.now()
    request.published_by = actor.username
    request.published_version = version.version if version else None
    request.carried_versions = [row.version for row in carried]
    shown = f"version {version.version}" if version else "the rule tables only"
    audited_save(
        request,
        actor=actor,
        before=before,
        reason=f"published as {shown}",
        serialize=serialize_change_request,
    )
