"""The change request page's Save and review forms, and the publish form's time field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from limits.admin.fields import UtcDateTimeField
from limits.changes.services import change_request_open
from limits.core.audit import Actor
from limits.models import ChangeRequest, ChangeRequestState
from limits.rules.documents import parse_time
from tests.factories import UserFactory
from tests.limits.changes.test_change_requests import _override
from tests.limits.test_admin_changes import _lowering, active  # noqa: F401  (fixture)

pytestmark = pytest.mark.django_db


def _draft(user) -> ChangeRequest:
    return change_request_open(
        actor=Actor(user=user), proposals=[_override("acme")], submit=False
    )


def test_request_page__save_buttons_and_heading(client, active, support_user):  # noqa: F811
    request = _draft(support_user)
    client.force_login(support_user)
    html = client.get(
        reverse("admin:limits_changerequest_change", args=[request.pk])
    ).text
    assert f"<h1>Change request #{request.pk}</h1>" in html
    assert "Change change request" not in html
    assert 'value="Save"' in html
    assert 'value="Save and submit for review"' in html


def test_request_page__save_and_submit__keeps_typed_title_and_reason(
    client,
    active,  # noqa: F811
    support_user,
):
    request = _draft(support_user)
    client.force_login(support_user)
    url = reverse("admin:limits_changerequest_change", args=[request.pk])
    response = client.post(
        url, {"title": "Acme launch", "reason": "Ticket 4711", "_submit": "1"}
    )
    assert response.status_code == 302
    request.refresh_from_db()
    assert (request.title, request.reason, request.state) == (
        "Acme launch",
        "Ticket 4711",
        ChangeRequestState.OPEN,
    )


def test_request_page__reviewer_requests_changes__draft_again_comment_shown(
    client,
    active,  # noqa: F811
    product_user,
):
    request = _lowering(product_user, active)
    reviewer = UserFactory(username="quinn", role="product")
    client.force_login(reviewer)
    page = reverse("admin:limits_changerequest_change", args=[request.pk])
    assert "Request changes" in client.get(page).text
    review = reverse("admin:limits_changerequest_review", args=[request.pk])
    client.post(review, {"verdict": "changes", "body": "Which ticket?"})
    request.refresh_from_db()
    assert request.state == ChangeRequestState.DRAFT
    html = client.get(page).text
    assert "Which ticket?" in html
    assert "requested changes" in html


def test_publish_form__lowering__earliest_time_filled_emergency_for_product_only(
    client,
    active,  # noqa: F811
    product_user,
    support_user,
):
    request = _lowering(product_user, active)
    client.force_login(product_user)
    url = reverse("admin:limits_changerequest_publish", args=[request.pk])
    form = client.get(url).context["form"]
    shown = datetime.strptime(form["effective_at"].value(), "%Y-%m-%dT%H:%MZ")
    shown = shown.replace(tzinfo=UTC)
    earliest = timezone.now() + timedelta(days=14)
    # the earliest allowed time, on a whole hour with room to send the form
    assert earliest + timedelta(minutes=9) <= shown <= earliest + timedelta(minutes=71)
    assert shown.minute == 0
    assert "emergency_reason" in form.fields
    support_request = _draft(support_user)
    client.force_login(support_user)
    url = reverse("admin:limits_changerequest_publish", args=[support_request.pk])
    assert "emergency_reason" not in client.get(url).context["form"].fields


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-12-31T14:00Z", datetime(2026, 12, 31, 14, 0, tzinfo=UTC)),
        ("2026-12-31 14:00", datetime(2026, 12, 31, 14, 0, tzinfo=UTC)),
        ("2026-12-31T15:00+01:00", datetime(2026, 12, 31, 14, 0, tzinfo=UTC)),
        ("", None),
    ],
)
def test_utc_field__iso_8601__read_as_utc(text, expected):
    assert UtcDateTimeField(required=False).clean(text) == expected


def test_utc_field__locale_format__refused_with_an_example():
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError, match="ISO 8601 in UTC"):
        UtcDateTimeField(required=False).clean("12/31/2026 02:00 PM")


def test_request_page__override__its_end_date_shown(client, active, support_user):  # noqa: F811
    request = _draft(support_user)
    expires = request.edits.get().after["expires_at"]
    client.force_login(support_user)
    html = client.get(
        reverse("admin:limits_changerequest_change", args=[request.pk])
    ).text
    assert f"ends {parse_time(expires):%Y-%m-%d %H:%M} UTC" in html


def test_publish_form__note_names_a_tenant__stopped_once_then_published(
    client,
    active,  # noqa: F811
    product_user,
    rules,
):
    from limits.models import Limit

    Limit.objects.filter(policy=rules["pro_search"]).update(rate=60, burst=120)
    client.force_login(product_user)
    url = reverse("admin:limits_snapshot_publish")
    said = {"message": "Raise pro search", "note": "Asked for by Acme, thanks!"}
    response = client.post(url, said)
    assert response.status_code == 200
    (error,) = response.context["form"].errors["note"]
    assert "names acme (" in error
    assert 'name="note_names_ok"' in response.text
    assert response.context["form"].fields["note_names_ok"].widget.input_type == (
        "checkbox"
    )
    response = client.post(url, {**said, "note_names_ok": "on"})
    assert response.status_code == 302
