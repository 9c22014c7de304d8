"""The public changelog as an Atom feed (Django's syndication framework)."""

from __future__ import annotations

from django.conf import settings
from django.contrib.syndication.views import Feed
from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.feedgenerator import Atom1Feed

from limits.announcements.changelog import ChangelogEntry, changelog_entries

__all__ = ["ChangelogFeed"]


class ChangelogFeed(Feed):
    """One item per version with public changes, latest effective time first."""

    feed_type = Atom1Feed
    subtitle = (
        "Changes to the API's rate limits, with the date each takes effect. "
        "Lowered limits are announced ahead of time."
    )

    def title(self) -> str:
        return f"{settings.SLUICE_BRAND} API rate limits: changelog"

    def author_name(self) -> str:
        return settings.SLUICE_BRAND

    def link(self) -> str:
        return reverse("changelog:index")

    def items(self) -> list[ChangelogEntry]:
        return changelog_entries(limit=50)

    def item_title(self, entry: ChangelogEntry) -> str:
        marks = "EMERGENCY · " if entry.emergency else ""
        marks += "upcoming · " if entry.status == "upcoming" else ""
        marks += "cancelled · " if entry.status == "cancelled" else ""
        return (
            f"{settings.SLUICE_BRAND} · {marks}Version {entry.version}, effective "
            f"{entry.effective_at:%Y-%m-%d %H:%M} UTC"
        )

    def item_description(self, entry: ChangelogEntry) -> str:
        return render_to_string("changelog/_entry.html", {"entry": entry})

    def item_link(self, entry: ChangelogEntry) -> str:
        return reverse("changelog:entry", args=[entry.announced_as])

    def item_guid(self, entry: ChangelogEntry) -> str:
        # the version it was first announced as: versions that carry it later
        # update this item rather than add one
        return f"tag:sluice,2026:changelog/version/{entry.announced_as}"

    item_guid_is_permalink = False

    def item_pubdate(self, entry: ChangelogEntry):
        return entry.published_at

    def item_updateddate(self, entry: ChangelogEntry):
        if entry.status == "upcoming":
            return entry.published_at
        if entry.status == "cancelled":
            return entry.cancelled_at or entry.published_at
        return entry.effective_at
