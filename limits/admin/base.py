"""Admin plumbing shared by the rule pages: forms checked by limits.rules.services,
writes proposed as change requests (``limits.admin.proposing``)."""

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError

from limits.rules import services as rules

from .proposing import ProposingAdmin


class ServiceValidatedForm(forms.ModelForm):
    """A model form that also runs the service's checks, so problems show on the form."""

    def _post_clean(self):
        super()._post_clean()
        if self.errors:
            return
        try:
            rules.rule_validate(obj=self.instance)
        except ValidationError as exc:
            self._update_errors(exc)


class ReadOnlyAdmin(admin.ModelAdmin):
    """Pages that show records nobody adds, edits or deletes here (history, statistics)."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class AuditedAdmin(ProposingAdmin):
    """Forms checked by the services; saves and deletes proposed as change requests,
    audited when they are made and when they are published."""

    form = ServiceValidatedForm
    readonly_fields = ("revision", "created_at", "updated_at")
