"""Discussing a change request over HTTP: comments, "request changes", reject."""

from __future__ import annotations

import pytest

from limits.core.audit import Actor
from limits.publishing.services import snapshot_publish
from tests.api.test_change_requests_api import _override

pytestmark = pytest.mark.django_db

B = "/api/v1"


@pytest.fixture
def opened(api, rules, redis_client, support_user):
    """Support's override request, open for review."""
    snapshot_publish(actor=Actor.system(), message="v1")
    api.as_user(support_user)
    response = api.post(
        f"{B}/change-requests",
        {"edits": [{"object": "policy", "value": _override()}], "reason": "launch"},
        format="json",
    )
    assert response.status_code == 201
    return response.json()["id"]


def test_review__changes_requested__draft_with_the_comment(api, opened, product_user):
    api.as_user(product_user)
    response = api.post(
        f"{B}/change-requests/{opened}/review",
        {"verdict": "changes", "body": "Which ticket?"},
        format="json",
    )
    assert response.status_code == 200
    body = response.json()
    assert body["state"] == "draft"
    assert [(c["author"], c["verdict"], c["body"]) for c in body["comments"]] == [
        ("pat-product", "changes", "Which ticket?")
    ]


def test_review__refusals__problem_naming_the_field_or_the_rule(
    api, opened, support_user
):
    api.as_user(support_user)
    empty = api.post(
        f"{B}/change-requests/{opened}/review", {"verdict": "reject"}, format="json"
    )
    assert empty.status_code == 400
    assert "body" in empty.json()["fields"]
    own = api.post(
        f"{B}/change-requests/{opened}/review",
        {"verdict": "reject", "body": "no"},
        format="json",
    )
    assert own.status_code == 403
    unknown = api.post(
        f"{B}/change-requests/{opened}/review",
        {"verdict": "veto", "body": "no"},
        format="json",
    )
    assert unknown.status_code == 400
    assert "verdict" in unknown.json()["fields"]
    # a comment by anyone with a role is fine, the author's own included
    said = api.post(
        f"{B}/change-requests/{opened}/review", {"body": "done"}, format="json"
    )
    assert said.status_code == 200
    assert said.json()["comments"][0]["verdict"] == "comment"
