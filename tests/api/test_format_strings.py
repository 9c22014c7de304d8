"""User text that looks like a format string ("%d", "%(x)s", "{0}") in every text field
the API and the admin take: answered as data (2xx or a field error), never a 500
from a message that formatted it (issue 25: "%d" in a route method did).
"""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.api.conftest import ApiClient

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("no_notice_period")]

#: Placeholders of %-formatting and of str.format, a lone '%', and a lone brace.
TEXTS = ["%d", "%(x)s", "100%", "%s%s%s", "{0}", "{x}", "{", "%n"]
B = "/api/v1"


def _bodies(text: str) -> list[tuple[str, dict]]:
    policy_limit = {"dimension": "tenant", "rate": 5, "period": 1, "burst": 5}
    return [
        (f"{B}/tiers", {"slug": text, "name": text, "description": text}),
        (f"{B}/tiers", {"slug": "t-ok", "name": text, "description": text}),
        (f"{B}/tenants", {"slug": text, "name": text, "tier": text}),
        (
            f"{B}/tenants",
            {"slug": "a", "name": "A", "tier": "pro", "contact_emails": [text]},
        ),
        (f"{B}/routes", {"slug": text, "methods": [text], "path_pattern": text}),
        (
            f"{B}/routes",
            {"slug": "r", "methods": ["GET"], "path_pattern": f"/v1/{text}"},
        ),
        (
            f"{B}/routes",
            {
                "slug": "r2",
                "methods": ["GET"],
                "path_pattern": "/v1/r2",
                "failure_mode": text,
                "description": text,
            },
        ),
        (
            f"{B}/policies",
            {"scope": text, "tier": text, "route": text, "limits": [policy_limit]},
        ),
        (
            f"{B}/policies",
            {
                "scope": "tier",
                "tier": "pro",
                "route": "search",
                "limits": [{**policy_limit, "dimension": text}],
            },
        ),
        (f"{B}/snapshots/publish", {"message": text, "note": text}),
        (
            f"{B}/change-requests",
            {
                "title": text,
                "reason": text,
                "edits": [{"object": text, "value": {"name": text}}],
            },
        ),
        (
            f"{B}/change-requests",
            {"edits": [{"object": "tier", "key": text, "value": {"name": text}}]},
        ),
        (
            f"{B}/rules/diff",
            {"document": f"format: 1\ntiers:\n  {text}: {{name: x}}\n"},
        ),
        (f"{B}/rules/diff", {"document": text}),
    ]


@pytest.mark.parametrize("text", TEXTS)
def test_api__format_placeholders_in_every_text_field__never_500(
    rules, product_user, text
):
    api = ApiClient(raise_request_exception=False).as_user(product_user)
    for url, body in _bodies(text):
        response = api.post(url, body, format="json")
        assert response.status_code < 500, (url, body, response.content)
    for query in (f"?tenant={text}&route={text}", f"?old={text}&new={text}"):
        for path in ("explain", "snapshots/diff"):
            response = api.get(f"{B}/{path}{query}")
            assert response.status_code < 500, (path, query, response.content)


@pytest.mark.parametrize("text", TEXTS)
def test_admin__format_placeholders_in_rule_forms__never_500(
    client, rules, product_user, text
):
    client.raise_request_exception = False
    client.force_login(product_user)
    forms = {
        "admin:limits_tier_add": {
            "slug": text,
            "name": text,
            "description": text,
            "position": "0",
        },
        "admin:limits_tenant_add": {
            "slug": text,
            "name": text,
            "tier": text,
            "contact_emails": f"{text}, {text}@x.example",
        },
        "admin:limits_route_add": {
            "slug": text,
            "description": text,
            "methods": text,
            "path_pattern": text,
            "cost": text,
            "failure_mode": text,
        },
    }
    for name, form in forms.items():
        response = client.post(reverse(name), form)
        assert response.status_code < 500, (name, form)
