"""Admin pages of the rule tables: tiers, tenants, routes, and policies with their limits."""

from django import forms
from django.contrib import admin, messages
from django.contrib.postgres.forms import SimpleArrayField
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Count
from django.forms.models import BaseInlineFormSet
from django.shortcuts import get_object_or_404, redirect
from django.template.loader import render_to_string
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html

from limits.changes.previews import edits_pending_for
from limits.choices import Role, ScopeKind
from limits.core.audit import Actor
from limits.core.roles import can_edit_policy, user_role
from limits.models import Limit, Policy, Route, Tenant, Tier
from limits.quotas.usage import tenant_quotas
from limits.rules import services as rules
from limits.support.raises import RAISE_DAYS, RAISE_FACTOR, override_raise
from limits.support.tenants import tenant_limits
from limits.versions.explain import effective_limits
from limits.versions.selectors import snapshot_active_version

from .announcements import QuotaRemindersAdminMixin, TenantLinkAdminMixin
from .base import AuditedAdmin
from .limit_form import LimitForm, limit_fieldsets
from .proposing import ProposingAdmin, key_of, proposal_of
from .tenant_form import TenantForm


@admin.register(Tier)
class TierAdmin(AuditedAdmin):
    subject = "tier"
    list_display = ("name", "slug", "position", "tenant_count", "updated_at")
    search_fields = ("slug", "name", "description")
    list_filter = ("created_at",)
    ordering = ("position", "slug")

    def get_queryset(self, request):
        return super().get_queryset(request).annotate(tenant_total=Count("tenants"))

    @admin.display(description="tenants", ordering="tenant_total")
    def tenant_count(self, tier):
        return tier.tenant_total


@admin.register(Tenant)
class TenantAdmin(QuotaRemindersAdminMixin, TenantLinkAdminMixin, AuditedAdmin):
    subject = "tenant"
    form = TenantForm
    list_display = ("slug", "name", "tier", "in_force_link", "updated_at")
    list_filter = ("tier", "quota_reminders")
    search_fields = ("slug", "name", "contact_emails")
    list_select_related = ("tier",)
    readonly_fields = (
        "effective_limits_table",
        "changelog_link",
        "quota_reminders",
        *AuditedAdmin.readonly_fields,
    )
    actions = [
        "issue_changelog_link",
        "revoke_changelog_link",
        "quota_reminders_on",
        "quota_reminders_off",
        "propose_removal",
    ]

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path(
                "<path:object_id>/support/",
                view(self.support_view),
                name="limits_tenant_support",
            ),
            path(
                "<path:object_id>/raise/",
                view(self.raise_view),
                name="limits_tenant_raise",
            ),
            *super().get_urls(),
        ]

    @admin.display(description="limits in the working copy (not yet enforced)")
    def effective_limits_table(self, tenant):
        if tenant.pk is None:
            return "Save the tenant to see the limits that apply to it."
        try:
            rows = effective_limits(tenant=tenant)
        except ValidationError as exc:  # a working copy gateways could not resolve
            return " ".join(exc.messages)
        return render_to_string(
            "admin/limits/tenant/effective_limits.html",
            {
                "rows": rows,
                "active": snapshot_active_version(),
                "support_url": reverse("admin:limits_tenant_support", args=[tenant.pk]),
            },
        )

    @admin.display(description="limits in force")
    def in_force_link(self, tenant):
        url = reverse("admin:limits_tenant_support", args=[tenant.pk])
        return format_html('<a href="{}">limits, usage, 429s</a>', url)

    def support_view(self, request, object_id):
        """What support reads: the limits gateways enforce now, usage, quotas this
        period, recent 429s."""
        tenant = get_object_or_404(Tenant, pk=object_id)
        if not self.has_view_permission(request, tenant):
            raise PermissionDenied
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"{tenant.slug}: limits in force",
            "tenant": tenant,
            "shown": tenant_limits(tenant=tenant),
            "quotas": tenant_quotas(tenant=tenant.slug),
            "can_raise": can_edit_policy(request.user, scope=ScopeKind.TENANT),
            "raise_factor": RAISE_FACTOR,
            "raise_days": RAISE_DAYS,
            "raise_until": timezone.now() + timezone.timedelta(days=RAISE_DAYS),
        }
        return TemplateResponse(request, "admin/limits/tenant/support.html", context)

    def raise_view(self, request, object_id):
        """One click (a POST with a reason): a change request for a temporary raise."""
        tenant = get_object_or_404(Tenant, pk=object_id)
        if request.method != "POST":
            return redirect("admin:limits_tenant_support", tenant.pk)
        try:
            row = override_raise(
                tenant=tenant,
                route=request.POST.get("route") or None,
                reason=request.POST.get("reason", ""),
                actor=Actor.from_request(request),
            )
        except (ValidationError, PermissionDenied) as exc:
            said = exc.messages if isinstance(exc, ValidationError) else [str(exc)]
            messages.error(request, " ".join(said))
            return redirect("admin:limits_tenant_support", tenant.pk)
        messages.success(
            request,
            f"Change request #{row.pk} raises {tenant.slug}: review and publish it.",
        )
        return redirect("admin:limits_changerequest_change", row.pk)


@admin.register(Route)
class RouteAdmin(AuditedAdmin):
    subject = "route"
    list_display = (
        "slug",
        "methods_text",
        "path_pattern",
        "cost",
        "max_cost",
        "failure_mode",
        "updated_at",
    )
    list_filter = ("failure_mode", "cost")
    search_fields = ("slug", "path_pattern", "description")

    def formfield_for_dbfield(self, db_field, request, **kwargs):
        if db_field.name != "methods":
            return super().formfield_for_dbfield(db_field, request, **kwargs)
        # Plain text items: the model says which methods exist (Route.clean_fields);
        # the choice field's item error crashed on a "%" (Django formats it twice).
        return SimpleArrayField(
            forms.CharField(), label="Methods", help_text=db_field.help_text
        )

    @admin.display(description="methods")
    def methods_text(self, route):
        return ", ".join(route.methods)


class LimitFormSet(BaseInlineFormSet):
    """Checks the limits of a policy as a whole, with the same service the API uses."""

    def __init__(self, *args, actor=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.actor = actor or Actor.system()

    def final_limits(self):
        """The limits the policy will have once saved: kept, changed and new rows."""
        deleted = set(self.deleted_forms)
        return [
            form.instance
            for form in self.forms
            if hasattr(form, "cleaned_data")
            and form not in deleted
            and (form.instance.pk is not None or form.has_changed())
        ]

    def clean(self):
        super().clean()
        if any(self.errors):
            return
        try:
            rules.policy_validate(
                policy=self.instance, limits=self.final_limits(), actor=self.actor
            )
        except ValidationError as exc:
            if hasattr(exc, "error_dict") and "limits" in exc.error_dict:
                raise ValidationError(exc.error_dict["limits"]) from None
        except PermissionDenied:  # reported once, by the policy form
            return


class LimitInline(admin.StackedInline):
    """The limits of a policy: each limit shows the settings of its kind, in the
    kind's words, the expert ones folded away (``limit_form.KINDS``)."""

    model = Limit
    form = LimitForm
    formset = LimitFormSet
    fieldsets = limit_fieldsets()
    readonly_fields = ("reads_as",)
    extra = 0
    min_num = 1

    def get_fieldsets(self, request, obj=None):
        if self.has_change_permission(request, obj):
            return self.fieldsets
        # Read only: each limit in its kind's words, not the settings of every kind.
        (_, first), *_, public = self.fieldsets
        return ((None, {"fields": (first["fields"][0], "reads_as")}), public)

    @admin.display(description="reads as")
    def reads_as(self, limit):
        return limit.describe() if limit.pk else "—"

    class Media:
        js = ("limits/limit_kinds.js",)
        css = {"all": ("limits/limit_kinds.css",)}


class PolicyKindFilter(admin.SimpleListFilter):
    title = "kind"
    parameter_name = "kind"

    def lookups(self, request, model_admin):
        return [
            ("permanent", "permanent"),
            ("override", "live override"),
            ("expired", "expired override"),
        ]

    def queryset(self, request, queryset):
        if self.value() == "permanent":
            return queryset.filter(expires_at__isnull=True)
        if self.value() == "override":
            return queryset.filter(expires_at__gt=timezone.now())
        if self.value() == "expired":
            return queryset.filter(expires_at__lte=timezone.now())
        return queryset


class PolicyForm(forms.ModelForm):
    class Meta:
        model = Policy
        fields = ("scope", "tier", "tenant", "route", "reason", "expires_at")

    def __init__(self, *args, actor=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.actor = actor or Actor.system()

    def _post_clean(self):
        super()._post_clean()
        if self.errors:
            return
        try:  # the role rules of the service, shown on the form instead of a 403 page
            rules.policy_validate(policy=self.instance, limits=[], actor=self.actor)
        except ValidationError as exc:
            errors = {k: v for k, v in exc.message_dict.items() if k != "limits"}
            if errors:
                self._update_errors(ValidationError(errors))
        except PermissionDenied as exc:
            self.add_error(None, str(exc))


@admin.register(Policy)
class PolicyAdmin(ProposingAdmin):
    subject = "policy"
    form = PolicyForm
    inlines = [LimitInline]
    list_display = (
        "__str__",
        "scope",
        "route_name",
        "limits_text",
        "expires_at",
        "updated_at",
    )
    list_filter = ("scope", PolicyKindFilter, "tier", "route")
    search_fields = (
        "tenant__slug",
        "tenant__name",
        "tier__slug",
        "route__slug",
        "reason",
    )
    list_select_related = ("tier", "tenant", "route")
    autocomplete_fields = ("tenant",)
    readonly_fields = ("revision", "created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("scope", "tier", "tenant", "route")}),
        (
            "Temporary override",
            {
                "fields": ("reason", "expires_at"),
                "description": "Support: a tenant override needs a reason and an expiry. "
                "While live it beats the tenant's permanent policy for the same route.",
            },
        ),
        (
            "History",
            {
                "fields": ("revision", "created_at", "updated_at"),
                "classes": ("collapse",),
            },
        ),
    )

    def get_queryset(self, request):
        return super().get_queryset(request).prefetch_related("limits")

    def change_view(self, request, object_id, form_url="", extra_context=None):
        policy = self.get_object(request, object_id)
        pending = edits_pending_for("policy", [key_of(policy)]) if policy else []
        extra = {"pending_edits": pending, "active_version": snapshot_active_version()}
        return super().change_view(
            request, object_id, form_url, {**extra, **(extra_context or {})}
        )

    def changelist_view(self, request, extra_context=None):
        extra = {"active_version": snapshot_active_version()}
        return super().changelist_view(request, {**extra, **(extra_context or {})})

    def get_fieldsets(self, request, obj=None):
        fieldsets = super().get_fieldsets(request, obj)
        return (
            fieldsets if obj is not None else fieldsets[:-1]
        )  # no history before it exists

    def get_form(self, request, obj=None, change=False, **kwargs):
        form_class = super().get_form(request, obj, change=change, **kwargs)
        actor = Actor.from_request(request)
        support = user_role(request.user) == Role.SUPPORT

        class RequestPolicyForm(form_class):
            def __init__(self, *args, **kw):
                super().__init__(*args, actor=actor, **kw)
                if support and "scope" in self.fields:
                    self.fields["scope"].choices = [
                        (ScopeKind.TENANT, ScopeKind.TENANT.label)
                    ]
                    self.fields["scope"].initial = ScopeKind.TENANT
                    self.fields["expires_at"].required = True
                    self.fields["reason"].required = True

        return RequestPolicyForm

    def get_formset_kwargs(self, request, obj, inline, prefix):
        kwargs = super().get_formset_kwargs(request, obj, inline, prefix)
        kwargs["actor"] = Actor.from_request(request)
        return kwargs

    def has_change_permission(self, request, obj=None):
        return super().has_change_permission(request, obj) and self._may_edit(
            request, obj
        )

    def has_delete_permission(self, request, obj=None):
        if obj is not None and obj.is_default:
            return False
        return super().has_delete_permission(request, obj) and self._may_edit(
            request, obj
        )

    @staticmethod
    def _may_edit(request, policy):
        if policy is None:
            return True
        if not can_edit_policy(request.user, scope=policy.scope):
            return False
        return user_role(request.user) != Role.SUPPORT or policy.expires_at is not None

    def save_model(self, request, obj, form, change):
        """Deferred to save_related: the policy is proposed whole, with its limits."""

    def save_related(self, request, form, formsets, change):
        (limit_formset,) = formsets
        limit_formset.save(commit=False)  # fills new/changed/deleted_objects
        limits = limit_formset.final_limits()
        self.propose(request, proposal_of("policy", form.instance, limits=limits))

    def delete_queryset(self, request, queryset):
        super().delete_queryset(
            request, [obj for obj in queryset if not obj.is_default]
        )

    @admin.display(description="route", ordering="route__slug")
    def route_name(self, policy):
        return policy.route.slug if policy.route_id else "all routes"

    @admin.display(description="limits")
    def limits_text(self, policy):
        return "; ".join(limit.describe() for limit in policy.limits.all()) or "—"
