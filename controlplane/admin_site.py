"""Sluice's admin site: Django's own, with a home page that shows the state of things.

``AdminSite.index`` gets the panels of ``limits.overview.selectors`` as extra
context and renders ``admin/limits/home.html``, which extends the admin's index
and keeps its app list below them. ``controlplane.apps.SluiceAdminConfig`` makes
it the default site (Django's ``default_site``), so ``admin.site`` is this one.
"""

from django.contrib import admin

from limits.overview.selectors import home_context


class SluiceAdminSite(admin.AdminSite):
    site_header = "Sluice"
    site_title = "Sluice control plane"
    index_title = "Rate limits: the state of things"
    index_template = "admin/limits/home.html"
    # Pages are made to fit a 1,280 px window: the app list is one click away on the
    # home page and in the breadcrumbs, so the nav sidebar's 300 px go to the content.
    enable_nav_sidebar = False

    def index(self, request, extra_context=None):
        return super().index(
            request, {**home_context(request), **(extra_context or {})}
        )
