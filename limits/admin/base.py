"""Admin plumbing shared by the rule pages: every write goes through limits.rules.services."""

from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError

from limits.core.audit import Actor
from limits.rules import services as rules


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


class AuditedAdmin(admin.ModelAdmin):
    """Saves and deletes through the services, which validate and write the audit log."""

    form = ServiceValidatedForm
    readonly_fields = ("revision", "created_at", "updated_at")

    def save_model(self, request, obj, form, change):
        rules.rule_save(obj=obj, actor=Actor.from_request(request))

    def delete_model(self, request, obj):
        rules.rule_delete(obj=obj, actor=Actor.from_request(request))

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self.delete_model(request, obj)
