"""Change requests: open, add to a draft, submit, approve, withdraw and rebase.

Every service locks the request, checks who may act, writes and audits in one
transaction (``limits.core.audit``). Edits are checked as they come in: each
document on its own (schema, the models' validators, override expiry), then the
rule set they make on top of the active version (``validate_rules``), so a
request that cannot be published is refused with its problems, not stored.
Publishing is ``limits.changes.publishing``.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass

from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction
from django.utils import timezone

from limits.changes.notify import change_request_notify_on_commit
from limits.changes.permissions import require_may_approve, require_may_propose
from limits.choices import AuditAction, Role
from limits.core.audit import Actor, audit_record, audited_save, serialize_for_audit
from limits.core.bulk import rows_copy
from limits.core.chain import chain_lock
from limits.core.roles import require_role, user_role
from limits.diff.diffing import EMPTY_RULES, RulesDiff, rules_diff
from limits.models import (
    Approval,
    ChangeEdit,
    ChangeOrigin,
    ChangeRequest,
    ChangeRequestState,
    Snapshot,
)
from limits.rules.checks import DocumentProblem, document_problems, rules_problems
from limits.rules.documents import (
    SUBJECTS,
    Document,
    Edit,
    document_key,
    document_normalize,
    documents_in,
    documents_of_rules,
    documents_of_tables,
    policy_document,
    rules_with,
)
from limits.versions.selectors import snapshot_get_active, snapshot_rules
from sluice.model import Rules, policy_ref

__all__ = [
    "EditsInvalid",
    "Proposal",
    "active_base",
    "auto_title",
    "change_request_approve",
    "change_request_discard_edit",
    "change_request_from_working_copy",
    "change_request_open",
    "change_request_propose",
    "change_request_rebase",
    "change_request_submit",
    "change_request_update",
    "change_request_withdraw",
    "edits_digest",
    "edits_known",
    "edits_of",
    "edits_recheck",
    "serialize_change_request",
]

_LIVE = (ChangeRequestState.DRAFT, ChangeRequestState.OPEN)


@dataclass(frozen=True)
class Proposal:
    """One object as someone wants it: ``after`` is its document (short forms are
    fine), None to remove it. ``key`` may be left empty for a policy (its scope,
    route and expiry name it)."""

    subject: str
    key: str
    after: Document | None


class EditsInvalid(ValidationError):
    """Some proposed edits are wrong; ``problems`` pair each with the index of its
    proposal (None: a problem of the rule set as a whole)."""

    def __init__(self, problems: list[tuple[int | None, DocumentProblem]]) -> None:
        self.problems = problems
        super().__init__(
            {"edits": [_said(index, p) for index, p in problems]}, code="invalid_edits"
        )


def _said(index: int | None, problem: DocumentProblem) -> str:
    return f"edit {index + 1}, {problem}" if index is not None else str(problem)


def edits_recheck(edits: Sequence[Edit]) -> None:
    """Raise EditsInvalid for a stored edit the rules refuse today: one saved before a
    bound existed (a rate above 2^31 - 1, which no rule table can hold), so that
    publishing it names the edit instead of failing in the database."""
    problems = [
        (index, problem)
        for index, edit in enumerate(edits)
        if edit.after is not None
        for problem in document_problems(edit.subject, edit.key, edit.after)
    ]
    if problems:
        raise EditsInvalid(problems)


def active_base() -> tuple[Snapshot | None, Rules]:
    """The active version and its rules (empty rules before the first publish)."""
    row = snapshot_get_active(light=True)  # its content is read once if needed
    return row, (snapshot_rules(row) if row else EMPTY_RULES)


def edits_of(change_request: ChangeRequest) -> list[Edit]:
    """The stored edits of a request, as value types."""
    return [
        Edit(doc["subject"], doc["key"], doc["before"], doc["after"])
        for doc in _edit_documents(change_request)
    ]


def edits_known(row: ChangeRequest, *, seen: ChangeRequest) -> None:
    """Let ``row`` (the request just locked) reuse the edits ``seen`` (the caller's
    copy of it) has read or written, when it is at the same revision: a request of
    100,000 edits is not read back in the transaction that wrote it."""
    cached = getattr(seen, "_edit_documents", None)
    if cached is not None and (seen.pk, seen.edit_revision) == (
        row.pk,
        row.edit_revision,
    ):
        row._edit_documents = cached  # type: ignore[attr-defined]


def _prepared(
    proposals: Sequence[Proposal],
    *,
    actor: Actor,
    base: Rules,
    existing: Sequence[Edit] = (),
    whole: bool = True,
) -> list[Edit]:
    """The edits of ``existing`` with ``proposals`` merged in (a later proposal for an
    object replaces an earlier one, which keeps the ``before`` it was made from),
    checked; edits that change nothing any more are dropped.

    Each document is checked on its own; with ``whole``, so is the rule set the
    edits make on top of ``base`` (a draft may be incomplete until it is
    submitted: its page lists those problems, and publishing refuses them)."""
    keyed = [(p, _key_of(p)) for p in proposals]
    require_may_propose(actor, [(p.subject, key) for p, key in keyed])
    problems: list[tuple[int | None, DocumentProblem]] = []
    merged = {(e.subject, e.key): e for e in existing}
    raw: dict[tuple[str, str], Document | None] = {
        k: e.after for k, e in merged.items()
    }
    held = documents_in(base, [(p.subject, key) for p, key in keyed if _known(p)])
    for index, (proposal, key) in enumerate(keyed):
        found = _problems(proposal, key, held)
        if found:
            problems += [(index, problem) for problem in found]
            continue
        earlier = merged.get((proposal.subject, key))
        before = earlier.before if earlier else held[(proposal.subject, key)]
        after = (
            document_normalize(proposal.subject, proposal.after)
            if proposal.after is not None
            else None
        )
        merged[(proposal.subject, key)] = Edit(proposal.subject, key, before, after)
        raw[(proposal.subject, key)] = proposal.after
    if whole and not problems:
        problems += _whole_set(base, merged, raw, keyed)
    if problems:
        raise EditsInvalid(problems)
    return [e for e in merged.values() if e.before != e.after]


def _key_of(proposal: Proposal) -> str:
    if proposal.key or proposal.after is None:
        return proposal.key
    try:
        return document_key(proposal.subject, proposal.after)
    except (KeyError, TypeError):
        return ""  # the schema check names what is missing


def _known(proposal: Proposal) -> bool:
    return proposal.subject in SUBJECTS


def _problems(
    proposal: Proposal, key: str, held: dict[tuple[str, str], Document | None]
) -> list[DocumentProblem]:
    if not _known(proposal):
        return [DocumentProblem(proposal.subject, key, (), "unknown kind of object")]
    if not key:
        return [DocumentProblem(proposal.subject, key, (), "give the object's key")]
    if proposal.after is None:
        if held[(proposal.subject, key)] is None:
            message = "nothing to remove: the active version has no such object"
            return [DocumentProblem(proposal.subject, key, (), message)]
        return []
    return document_problems(proposal.subject, key, proposal.after)


def _whole_set(base, merged, raw, keyed) -> list[tuple[int | None, DocumentProblem]]:
    """Problems of the rule set the edits make, on the proposal they come from."""
    checked = [Edit(s, k, None, raw[(s, k)]) for (s, k) in merged]
    policies = {k: doc for (s, k), doc in raw.items() if s == "policy" and doc}
    policies.update(
        {k: doc for (s, k), doc in _base_policies(base).items() if (s, k) not in raw}
    )
    index = {(p.subject, key): i for i, (p, key) in enumerate(keyed)}
    try:
        rules = rules_with(base, checked)
    except (KeyError, ValueError) as exc:
        return [
            (None, DocumentProblem("rules", "", (), f"not a valid document: {exc}"))
        ]
    return [
        (index.get((problem.subject, problem.key)), problem)
        for problem in rules_problems(rules, policies)
    ]


def _base_policies(base: Rules) -> dict[tuple[str, str], Document]:
    return {("policy", policy_ref(p)): policy_document(p) for p in base.policies}


#: A request's audit entries list its edits up to this many; every entry has the
#: digest of all of them (``edits_digest``), which the stored edits can be checked
#: against, so a file of 100,000 tenants is one entry of a few hundred bytes.
AUDITED_EDITS = 100


def serialize_change_request(change_request: ChangeRequest) -> dict:
    """The audited state of a request: its fields, the number and digest of its edits,
    and the edits themselves when there are at most ``AUDITED_EDITS`` (not the
    cached diff)."""
    data = serialize_for_audit(change_request, leave_out=("summary",))
    edits = _edit_documents(change_request)
    data["edits_count"] = len(edits)
    data["edits_digest"] = edits_digest(edits)
    if len(edits) <= AUDITED_EDITS:
        data["edits"] = edits
    return data


def edits_digest(edits: Sequence[Document]) -> str:
    """SHA-256 of the edits, each as canonical JSON (sorted keys, no spaces) on a
    line of its own, in the request's order: what a whole change is, in 64 digits."""
    digest = hashlib.sha256()
    for edit in edits:
        line = json.dumps(
            edit, sort_keys=True, separators=(",", ":"), ensure_ascii=False
        )
        digest.update(line.encode() + b"\n")
    return digest.hexdigest()


def _edit_documents(change_request: ChangeRequest) -> list[Document]:
    """The request's edits as documents, read once per request object (``_write``
    keeps them up to date): a request of 100,000 edits is audited several times."""
    cached = getattr(change_request, "_edit_documents", None)
    if cached is None:
        rows = change_request.edits.order_by("id").values_list(
            "subject", "key", "before", "after"
        )
        cached = [_edit_document(*row) for row in rows]
        change_request._edit_documents = cached  # type: ignore[attr-defined]
    return cached


def _edit_document(subject, key, before, after) -> Document:
    return {"subject": subject, "key": key, "before": before, "after": after}


def _summarize(
    change_request: ChangeRequest,
    edits: Sequence[Edit],
    known: tuple[int | None, RulesDiff] | None = None,
) -> None:
    """Store the diff of ``edits`` against the active version on the request;
    ``known``: (version, diff) the caller computed of the same edits, used when that
    version is still the active one (a rules file's diff: 120,000 changes)."""
    row, base = active_base()
    version = row.version if row else None
    if known is not None and known[0] == version:
        diff = known[1]
    else:
        diff = rules_diff(base, rules_with(base, edits))
    change_request.summary = diff.to_json()
    change_request.summary_version = row.version if row else None
    change_request.lowers = diff.lowers
    change_request.reach = len(diff.affected_tenants)


def _write(change_request: ChangeRequest, edits: Sequence[Edit]):
    def write() -> None:
        change_request.save()
        change_request.edits.all().delete()
        rows_copy(
            ChangeEdit,
            ("change_request", "subject", "key", "before", "after"),
            ((change_request.pk, e.subject, e.key, e.before, e.after) for e in edits),
        )
        change_request._edit_documents = [  # type: ignore[attr-defined]
            _edit_document(e.subject, e.key, e.before, e.after) for e in edits
        ]

    return write


def auto_title(edits: Sequence[Edit]) -> str:
    """A title that says what the edits change: ``Set tenant initech · search (override)``."""
    words = [_edit_name(edit) for edit in edits[:3]]
    more = f" and {len(edits) - 3} more" if len(edits) > 3 else ""
    return ("; ".join(words) + more)[:200] or "Empty change request"


def _edit_name(edit: Edit) -> str:
    verb = "Remove" if edit.removes else ("Add" if edit.before is None else "Change")
    if edit.subject != "policy":
        return f"{verb} {edit.subject} {edit.key}"
    scope, _, route = edit.key.rstrip("~").partition("/")
    where = (
        scope.replace(":", " ", 1) + " · " + ("all routes" if route == "*" else route)
    )
    return f"{verb} {where}" + (" (override)" if edit.key.endswith("~") else "")


@transaction.atomic
def change_request_open(
    *,
    actor: Actor,
    proposals: Sequence[Proposal],
    title: str = "",
    reason: str = "",
    origin: str = ChangeOrigin.API,
    submit: bool = True,
    diff: tuple[int | None, RulesDiff] | None = None,
) -> ChangeRequest:
    """Open a change request of ``proposals`` on top of the active version; audited.

    Submitted at once unless ``submit`` is false (a draft). ``diff``: (version, diff)
    of the proposals the caller computed already (see ``_summarize``). Raises
    EditsInvalid, PermissionDenied, ValidationError when nothing would change.
    """
    _, base = active_base()
    edits = _prepared(proposals, actor=actor, base=base, whole=submit)
    if not edits:
        raise ValidationError(
            {"edits": "Nothing to change: every edit matches the active version."}
        )
    now = timezone.now()
    request = ChangeRequest(
        title=title.strip()[:200] or auto_title(edits),
        reason=reason.strip(),
        origin=origin,
        state=ChangeRequestState.OPEN if submit else ChangeRequestState.DRAFT,
        author=actor.user,
        author_name=actor.username,
        submitted_at=now if submit else None,
    )
    _summarize(request, edits, diff if len(edits) == len(proposals) else None)
    audited_save(
        request,
        actor=actor,
        before=None,
        reason=request.reason,
        serialize=serialize_change_request,
        write=_write(request, edits),
    )
    if (
        submit and actor.user is not None
    ):  # people ask for a review; the system does not
        change_request_notify_on_commit(
            request, "change_request.submitted", actor=actor.username
        )
    return request


@transaction.atomic
def change_request_propose(
    *, actor: Actor, proposals: Sequence[Proposal], origin: str = ChangeOrigin.ADMIN
) -> ChangeRequest:
    """Add ``proposals`` to the actor's draft change request (opened if there is none);
    audited. What the admin's forms do instead of changing the rules."""
    if actor.user is None:
        raise PermissionDenied("Drafts belong to people; the system opens requests.")
    chain_lock()  # before the draft's row lock (limits.core.chain: lock order)
    draft = (
        ChangeRequest.objects.select_for_update()
        .filter(author=actor.user, state=ChangeRequestState.DRAFT)
        .order_by("-id")
        .first()
    )
    if draft is None:
        return change_request_open(
            actor=actor, proposals=proposals, origin=origin, submit=False
        )
    _, base = active_base()
    old = edits_of(draft)
    edits = _prepared(proposals, actor=actor, base=base, existing=old, whole=False)
    _save_edits(draft, edits, old, actor, reason="edits added")
    return draft


def _save_edits(request, edits, old, actor, *, reason: str) -> None:
    before = serialize_change_request(request)
    if request.title == auto_title(old):  # a title nobody wrote follows the edits
        request.title = auto_title(edits)
    request.edit_revision += 1
    _summarize(request, edits)
    audited_save(
        request,
        actor=actor,
        before=before,
        reason=reason,
        serialize=serialize_change_request,
        write=_write(request, edits),
    )


def _locked(change_request: ChangeRequest, *states: str) -> ChangeRequest:
    chain_lock()  # before the request's row lock (limits.core.chain: lock order)
    row = ChangeRequest.objects.select_for_update().get(pk=change_request.pk)
    if states and row.state not in states:
        raise ValidationError(
            f"Change request #{row.pk} is {row.state}: it cannot be changed now."
        )
    return row


def _require_owner(actor: Actor, request: ChangeRequest) -> None:
    """The author, a product person or the system may manage a request."""
    if actor.user is None or request.author_id == actor.user.pk:
        return
    if user_role(actor.user) != Role.PRODUCT:
        raise PermissionDenied("Only its author or a product person may do this.")


@transaction.atomic
def change_request_discard_edit(
    *, change_request: ChangeRequest, key: str, subject: str, actor: Actor
) -> ChangeRequest:
    """Drop one edit of a live request; approvals given so far no longer count."""
    request = _locked(change_request, *_LIVE)
    _require_owner(actor, request)
    old = edits_of(request)
    kept = [e for e in old if (e.subject, e.key) != (subject, key)]
    if len(kept) == len(old):
        raise ValidationError({"key": f"This request does not edit {subject} {key}."})
    _save_edits(request, kept, old, actor, reason=f"edit of {subject} {key} dropped")
    return request


@transaction.atomic
def change_request_update(
    *, change_request: ChangeRequest, actor: Actor, title: str, reason: str
) -> ChangeRequest:
    """Change the title and reason of a live request (its approvals still count)."""
    request = _locked(change_request, *_LIVE)
    _require_owner(actor, request)
    if not title.strip():
        raise ValidationError({"title": "Say in a few words what this changes."})
    before = serialize_change_request(request)
    request.title, request.reason = title.strip()[:200], reason.strip()
    audited_save(
        request,
        actor=actor,
        before=before,
        reason=request.reason,
        serialize=serialize_change_request,
    )
    return request


@transaction.atomic
def change_request_submit(
    *, change_request: ChangeRequest, actor: Actor
) -> ChangeRequest:
    """Propose a draft: it is open for review and publishing from now on."""
    request = _locked(change_request, ChangeRequestState.DRAFT)
    _require_owner(actor, request)
    if not request.edits.exists():
        raise ValidationError("This draft has no edits: add some first.")
    _, base = active_base()
    edits = edits_of(request)
    _prepared(
        [Proposal(e.subject, e.key, e.after) for e in edits],
        actor=actor,
        base=base,
        existing=edits,
    )
    _set_state(request, ChangeRequestState.OPEN, actor, reason="submitted")
    change_request_notify_on_commit(
        request, "change_request.submitted", actor=actor.username
    )
    return request


def _set_state(request, state, actor, *, reason: str) -> None:
    before = serialize_change_request(request)
    now = timezone.now()
    request.state = state
    if state == ChangeRequestState.OPEN:
        request.submitted_at = now
    if state in (ChangeRequestState.WITHDRAWN, ChangeRequestState.PUBLISHED):
        request.closed_at = now
    audited_save(
        request,
        actor=actor,
        before=before,
        reason=reason,
        serialize=serialize_change_request,
    )


@transaction.atomic
def change_request_approve(*, change_request: ChangeRequest, actor: Actor) -> Approval:
    """Approve the current revision of an open request (a product person other than
    the author); audited. Approving again is a no-op."""
    request = _locked(change_request, ChangeRequestState.OPEN)
    require_may_approve(actor, request)
    approval, created = Approval.objects.get_or_create(
        change_request=request,
        user=actor.user,
        revision=request.edit_revision,
        defaults={"user_name": actor.username},
    )
    if created:
        audit_record(
            actor=actor,
            action=AuditAction.APPROVE,
            obj=request,
            after={"revision": request.edit_revision, "approved_by": actor.username},
            reason=f"approved revision {request.edit_revision}",
        )
        change_request_notify_on_commit(
            request, "change_request.approved", actor=actor.username
        )
    return approval


@transaction.atomic
def change_request_withdraw(
    *, change_request: ChangeRequest, actor: Actor, reason: str = ""
) -> ChangeRequest:
    """Withdraw a live request: it will never be published."""
    request = _locked(change_request, *_LIVE)
    _require_owner(actor, request)
    _set_state(
        request, ChangeRequestState.WITHDRAWN, actor, reason=reason or "withdrawn"
    )
    return request


@transaction.atomic
def change_request_rebase(
    *, change_request: ChangeRequest, actor: Actor
) -> ChangeRequest:
    """Take the active version as the new base of every edit (what each object is
    now), keeping what the edits set: the way out of a conflict, once someone has
    looked at what changed underneath. Approvals given so far no longer count."""
    request = _locked(change_request, *_LIVE)
    _require_owner(actor, request)
    _, base = active_base()
    old = edits_of(request)
    proposals = [Proposal(e.subject, e.key, e.after) for e in old]
    edits = _prepared(proposals, actor=actor, base=base)
    if not edits:
        raise ValidationError(
            "Nothing left to change: the active version already has these edits. "
            "Withdraw the request."
        )
    _save_edits(request, edits, old, actor, reason="rebased on the active version")
    return request


@transaction.atomic
def change_request_from_working_copy(*, actor: Actor, title: str = "") -> ChangeRequest:
    """Open a change request of every difference between the active version and the
    rule tables (edits made there directly: the REST CRUD endpoints, commands);
    the product role's, like publishing the working copy."""
    require_role(actor, Role.PRODUCT, to="propose the working copy's edits")
    _, base = active_base()
    edits = documents_of_rules(base).edits_to(documents_of_tables())
    proposals = [Proposal(e.subject, e.key, e.after) for e in edits]
    return change_request_open(
        actor=actor,
        proposals=proposals,
        title=title or "The working copy's unpublished edits",
        origin=ChangeOrigin.WORKING_COPY,
    )
