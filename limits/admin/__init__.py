"""The Django admin of Sluice: rules, audit log, versions and publishing,
announcements, traffic dashboards."""

from django.contrib import admin

from . import (  # noqa: F401  (registers the model admins)
    announcements,
    audit,
    dashboards,
    deliveries,
    rules,
    snapshots,
    tokens,
)

admin.site.site_header = "Sluice"
admin.site.site_title = "Sluice control plane"
admin.site.index_title = "Rate-limit rules"
