"""The admin's app config: Django admin with Sluice's own site (a home page that shows
the state of things), through Django's documented ``default_site`` extension point."""

from django.contrib.admin.apps import AdminConfig


class SluiceAdminConfig(AdminConfig):
    default_site = "controlplane.admin_site.SluiceAdminSite"
