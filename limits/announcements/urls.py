"""Public changelog URLs, mounted at ``/changelog/``."""

from django.urls import path

from limits.announcements import views
from limits.announcements.feeds import ChangelogFeed

app_name = "changelog"

urlpatterns = [
    path("", views.changelog_index, name="index"),
    path("changes.json", views.changelog_json, name="json"),
    path("feed.atom", ChangelogFeed(), name="feed"),
    path("<int:version>/", views.entry_page, name="entry"),
    path("tenant/<str:token>/", views.tenant_page, name="tenant"),
    path("tenant/<str:token>/limits.json", views.tenant_json, name="tenant-json"),
]
