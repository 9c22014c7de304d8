"""The rule pages propose instead of writing: saving a tier, tenant, route or policy
adds it to your draft change request, and deleting one proposes its removal.

Django admin's own extension points do it: ``save_model``/``save_related`` and
``delete_model`` call ``limits.changes.services.change_request_propose``; the
``response_*`` hooks send you to the draft, which says the change is not live
until it is published; the admin's LogEntry history is not written (the object
is not saved yet: the audit log and the request's own history record it).
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import ValidationError
from django.http import HttpResponseRedirect
from django.shortcuts import redirect
from django.urls import reverse

from limits.changes.services import Proposal, active_base, change_request_propose
from limits.core.audit import Actor
from limits.models import ChangeRequest
from limits.rules.documents import document_in, document_key, row_document
from limits.rules.services import rule_delete

__all__ = ["ProposingAdmin", "proposal_of", "removal_of"]


def key_of(obj) -> str:
    """The document key of a rule row."""
    if hasattr(obj, "slug"):
        return obj.slug
    return document_key("policy", row_document(obj, limits=[]))


def proposal_of(subject: str, obj, limits=None) -> list[Proposal]:
    """The proposals that make the stored object what ``obj`` is now: its document,
    and the removal of its old key when it was renamed (a slug, a policy's scope)."""
    doc = row_document(obj, limits=limits) if subject == "policy" else row_document(obj)
    key = document_key(subject, doc, getattr(obj, "slug", ""))
    proposals = [Proposal(subject, key, doc)]
    if obj.pk is not None:
        stored = type(obj)._default_manager.get(pk=obj.pk)
        old = key_of(stored)
        if old != key:
            proposals.append(Proposal(subject, old, None))
    return proposals


def removal_of(subject: str, obj) -> Proposal:
    return Proposal(subject, key_of(obj), None)


class ProposingAdmin(admin.ModelAdmin):
    """A rule page whose saves and deletes become edits of a change request."""

    subject = ""

    def propose(self, request, proposals: list[Proposal]) -> None:
        try:
            found = change_request_propose(
                actor=Actor.from_request(request), proposals=proposals
            )
        except ValidationError as exc:  # nothing differs from the active version
            request.sluice_proposed = None
            request.sluice_said = " ".join(exc.messages)
            return
        request.sluice_proposed = found

    def save_model(self, request, obj, form, change):
        self.propose(request, proposal_of(self.subject, obj))

    def delete_model(self, request, obj):
        self.delete_queryset(request, [obj])

    def delete_queryset(self, request, queryset):
        """Propose removing what gateways have; delete at once (audited) what only the
        working copy ever held: removing it changes nothing published."""
        _, base = active_base()
        actor = Actor.from_request(request)
        published = []
        for obj in queryset:
            if document_in(base, self.subject, key_of(obj)) is None:
                rule_delete(obj=obj, actor=actor, reason="never published")
                messages.info(request, f"Deleted {obj}: it was never published.")
            else:
                published.append(removal_of(self.subject, obj))
        if published:
            self.propose(request, published)
        else:
            request.sluice_proposed = None
            request.sluice_said = "Nothing to propose."

    def get_actions(self, request):
        actions = super().get_actions(request)
        actions.pop("delete_selected", None)  # it would say "deleted"
        return actions

    @admin.action(description="Propose removing the selected objects")
    def propose_removal(self, request, queryset):
        self.delete_queryset(request, queryset)
        return self._to_request(request)

    actions = ["propose_removal"]

    # The object is not written: nothing for the admin's own history to point at.
    def log_addition(self, request, obj, message):
        return None

    def log_change(self, request, obj, message):
        return None

    def log_deletion(self, request, obj, object_repr):
        return None

    def log_deletions(self, request, queryset):
        return None

    def response_add(self, request, obj, post_url_continue=None):
        if "_addanother" in request.POST and getattr(request, "sluice_proposed", None):
            self._said(request)
            return HttpResponseRedirect(request.path)
        return self._to_request(request)

    def response_change(self, request, obj):
        if "_continue" in request.POST and getattr(request, "sluice_proposed", None):
            self._said(request)
            return HttpResponseRedirect(request.path)
        return self._to_request(request)

    def response_delete(self, request, obj_display, obj_id):
        return self._to_request(request)

    def _said(self, request) -> ChangeRequest | None:
        found = getattr(request, "sluice_proposed", None)
        if found is None:
            said = getattr(request, "sluice_said", "") or "Nothing changed."
            if said != "Nothing to propose.":
                messages.warning(request, said)
            return None
        messages.success(
            request,
            f"Added to your draft change request #{found.pk}. It is not live until it "
            "is published: review it below, then submit or publish it.",
        )
        return found

    def _to_request(self, request):
        found = self._said(request)
        if found is None:
            opts = self.model._meta
            return redirect(f"admin:{opts.app_label}_{opts.model_name}_changelist")
        return redirect(reverse("admin:limits_changerequest_change", args=[found.pk]))
