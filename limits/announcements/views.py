"""Public pages: the changelog (HTML, JSON) and a tenant's private page.

Readable without logging in. They show only what ``limits.announcements.changelog`` lets the
audience see; the private page answers 404 for any token that is not valid now.
"""

from __future__ import annotations

from django.http import Http404, JsonResponse
from django.template.response import TemplateResponse
from django.views.decorators.cache import cache_control, never_cache
from django.views.decorators.http import require_GET

from limits.announcements.changelog import changelog_entries, changelog_entry
from limits.announcements.tenant_links import tenant_link_resolve, tenant_overview
from limits.versions.selectors import snapshot_get_active

__all__ = [
    "changelog_index",
    "changelog_json",
    "entry_page",
    "tenant_json",
    "tenant_page",
]

_PUBLIC = cache_control(public=True, max_age=60)


@require_GET
@_PUBLIC
def changelog_index(request):
    """Every version with public changes, latest effective time first, and which
    version is in effect now (listed or not: its changes may all be private)."""
    entries = changelog_entries()
    active = snapshot_get_active(light=True)
    context = {
        "entries": entries,
        "in_effect": active,
        "in_effect_listed": bool(active)
        and any(entry.version == active.version for entry in entries),
    }
    return TemplateResponse(request, "changelog/index.html", context)


@require_GET
@_PUBLIC
def changelog_json(request):
    """The same as JSON: ``{"versions": [...]}`` (format in docs/announcements.md)."""
    entries = [entry.to_json() for entry in changelog_entries()]
    return JsonResponse({"versions": entries})


@require_GET
@_PUBLIC
def entry_page(request, version: int):
    entry = changelog_entry(version)
    if entry is None:
        raise Http404("No public changes in this version.")
    return TemplateResponse(request, "changelog/entry.html", {"entry": entry})


def _private(response):
    """The token is the credential: keep it out of caches, indexes and Referer headers."""
    response["X-Robots-Tag"] = "noindex, nofollow"
    response["Referrer-Policy"] = "no-referrer"
    return response


def _overview(token: str):
    tenant = tenant_link_resolve(token)
    if tenant is None:
        raise Http404("This link is not valid (any more).")
    return tenant_overview(tenant=tenant)


@require_GET
@never_cache
def tenant_page(request, token: str):
    """A tenant's limits per route and its upcoming changes, for the holder of its link."""
    context = {"overview": _overview(token)}
    return _private(TemplateResponse(request, "changelog/tenant.html", context))


@require_GET
@never_cache
def tenant_json(request, token: str):
    overview = _overview(token)
    return _private(
        JsonResponse(
            {
                "tenant": overview.tenant.slug,
                "version": overview.version,
                "limits": [
                    {
                        "route": row.route,
                        "limits": row.limits,
                        "policy": row.resolution.policy.describe(),
                    }
                    for row in overview.limits
                ],
                "quotas": [quota.to_json() for quota in overview.quotas.quotas],
                "quotas_unavailable": overview.quotas.unavailable,
                "upcoming": [
                    {**entry.to_json(), "impact": overview.estimates.get(entry.version)}
                    for entry in overview.upcoming
                ],
            }
        )
    )
