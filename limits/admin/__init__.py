"""The Django admin of Sluice: rules, audit log, versions and publishing (later: fleet)."""

from django.contrib import admin

from . import audit, rules, snapshots, tokens  # noqa: F401  (registers the model admins)

admin.site.site_header = "Sluice"
admin.site.site_title = "Sluice control plane"
admin.site.index_title = "Rate-limit rules"
