"""What customers read of a pending change, and how a team discusses a change request,
walked in a real browser: one changelog entry however many versions carry a
lowering, "cancelled" only when someone cancels it, and "request changes"."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect

from limits.changes.publishing import change_request_publish
from limits.changes.services import (
    Proposal,
    change_request_approve,
    change_request_open,
)
from limits.core.audit import Actor
from limits.models import ChangeRequest
from limits.rules.documents import document_in
from limits.versions.selectors import (
    snapshot_get_active,
    snapshot_rules,
    snapshot_scheduled,
)
from sluice.rules import format_time
from tests.browser.conftest import login, save_screenshot, submit
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

ATOM = "{http://www.w3.org/2005/Atom}"


def _actor(username: str) -> Actor:
    return Actor(user=get_user_model().objects.get(username=username))


def _lowered(key: str, rate: int, burst: int) -> Proposal:
    doc = document_in(snapshot_rules(snapshot_get_active()), "policy", key)
    for limit in doc["limits"]:
        if limit["dimension"] == "tenant":
            limit.update(rate=rate, burst=burst)
    return Proposal("policy", key, doc)


def _raise(tenant: str) -> None:
    """An unrelated change, published now by support: an override for ``tenant``."""
    expires = format_time(datetime.now(UTC) + timedelta(days=3))
    doc = {
        "scope": f"tenant:{tenant}",
        "route": "search",
        "expires_at": expires,
        "reason": "Launch week",
        "limits": [
            {"dimension": "tenant", "rate": 50, "period": "second", "burst": 100}
        ],
    }
    request = change_request_open(
        actor=_actor("support"), proposals=[Proposal("policy", "", doc)]
    )
    change_request_publish(change_request=request, actor=_actor("support"))


def _scheduled_lowering() -> int:
    """Free search lowered in 15 days, approved and published; its version."""
    UserFactory(username="product2", password="product2", role="product")
    request = change_request_open(
        actor=_actor("product"), proposals=[_lowered("tier:free/search", 3, 6)]
    )
    change_request_approve(change_request=request, actor=_actor("product2"))
    done = change_request_publish(
        change_request=request,
        actor=_actor("product"),
        effective_at=datetime.now(UTC) + timedelta(days=15),
        note="Free search moves to 3 requests per second.",
    )
    return done.version.version


def test_lowering_carried_twice__changelog_and_feed_show_one_upcoming_entry(page):
    # Given a lowering of free search published with the time the form fills in
    UserFactory(username="product2", password="product2", role="product")
    request = change_request_open(
        actor=_actor("product"), proposals=[_lowered("tier:free/search", 3, 6)]
    )
    change_request_approve(change_request=request, actor=_actor("product2"))
    login(page, "product")
    page.goto(f"/admin/limits/changerequest/{request.pk}/publish/")
    filled = page.input_value("#id_effective_at")
    assert filled.endswith(":00Z")  # ISO 8601 UTC, the earliest whole hour allowed
    assert datetime.fromisoformat(filled) > datetime.now(UTC) + timedelta(days=14)
    page.fill("#id_note", "Free search moves to 3 requests per second.")
    submit(page, "input[value=Publish]")
    expect(page.locator(".messagelist")).to_contain_text("taking effect")
    (announced,) = snapshot_scheduled()
    # When two unrelated raises are published now, each carried into the lowering
    _raise("initech")
    _raise("acme")
    (carrier,) = snapshot_scheduled()
    assert carrier.version > announced.version
    # Then the changelog shows the lowering once, upcoming, and no "cancelled"
    page.goto("/changelog/")
    entries = page.locator("section.entry", has_text="3 / s, burst 6")
    expect(entries).to_have_count(1)
    expect(entries.first.locator(".badge.upcoming")).to_be_visible()
    expect(entries.first).to_contain_text(f"Announced as version {announced.version}")
    expect(page.locator(".badge.cancelled")).to_have_count(0)
    save_screenshot(page, "changelog-lowering-carried-twice")
    # And so does the feed: one item, under the id of its first announcement
    feed = ET.fromstring(page.request.get("/changelog/feed.atom").body())
    items = feed.findall(f"{ATOM}entry")
    upcoming = [i for i in items if "upcoming" in i.find(f"{ATOM}title").text]
    assert len(upcoming) == 1
    assert upcoming[0].find(f"{ATOM}id").text.endswith(f"/{announced.version}")
    assert not [i for i in items if "cancelled" in i.find(f"{ATOM}title").text]


def test_reviewer_requests_changes__author_edits_and_saves__reviewer_approves(
    page, browser, live_server
):
    # Given product's lowering, open for review
    UserFactory(
        username="product2",
        password="product2",
        role="product",
        email="product2@sluice.localhost",
    )
    request = change_request_open(
        actor=_actor("product"),
        proposals=[_lowered("tier:pro/search", 20, 40)],
        title="Lower pro search",
    )
    page_url = f"/admin/limits/changerequest/{request.pk}/change/"
    # When the reviewer asks for changes, saying what
    other = browser.new_context(
        base_url=live_server.url, viewport={"width": 1280, "height": 900}
    )
    reviewer = other.new_page()
    login(reviewer, "product2")
    reviewer.goto(page_url)
    reviewer.fill("#id_body", "Give the ticket number in the reason.")
    submit(reviewer, "button[value=changes]")
    expect(reviewer.locator(".messagelist")).to_contain_text("Sent back to the author")
    # Then the author finds it a draft again, with the comment
    login(page, "product")
    page.goto(page_url)
    expect(page.locator("#request-meta")).to_contain_text("Draft")
    expect(page.locator("#comments")).to_contain_text(
        "Give the ticket number in the reason."
    )
    expect(page.locator("#comments")).to_contain_text("requested changes")
    # When the author edits the reason, saves, then submits it again
    page.fill("#id_reason", "Costs of search, ticket 4711")
    submit(page, "input[name=_save]")
    expect(page.locator(".messagelist")).to_contain_text("Saved.")
    expect(page.locator("#id_reason")).to_have_value("Costs of search, ticket 4711")
    submit(page, "input[name=_submit]")
    expect(page.locator(".messagelist")).to_contain_text("submitted for review")
    # And the reviewer approves it
    reviewer.goto(page_url)
    submit(reviewer, "input[value=Approve]")
    expect(reviewer.locator(".messagelist")).to_contain_text("Approved.")
    save_screenshot(reviewer, "change-request-changes-requested-then-approved")
    other.close()
    request = ChangeRequest.objects.get(pk=request.pk)
    assert (request.state, request.reason) == ("open", "Costs of search, ticket 4711")
    assert [a.user_name for a in request.approvals.all()] == ["product2"]
    assert request.approvals.get().revision == request.edit_revision


def test_scheduled_version_cancelled__changelog_says_so_once(page):
    # Given a lowering scheduled, then carried into a later version by a raise
    _scheduled_lowering()
    _raise("initech")
    (carrier,) = snapshot_scheduled()
    # When product cancels it from its version page, with a public note
    login(page, "product")
    page.goto(f"/admin/limits/snapshot/{carrier.pk}/change/")
    page.click("text=Cancel or move…")
    page.fill("#id_cancel-reason", "Customers asked for more time")
    page.fill("#id_cancel-note", "Free search stays at 5 requests per second.")
    submit(page, f"input[value='Cancel version {carrier.version}']")
    expect(page.locator(".messagelist")).to_contain_text(
        f"Version {carrier.version} is cancelled."
    )
    assert snapshot_scheduled().count() == 0
    # Then the changelog says "cancelled" once, with the note, and nothing upcoming
    page.goto("/changelog/")
    expect(page.locator(".badge.cancelled")).to_have_count(1)
    expect(page.locator(".badge.upcoming")).to_have_count(0)
    entry = page.locator("section.entry", has=page.locator(".badge.cancelled"))
    expect(entry).to_contain_text("Free search stays at 5 requests per second.")
    expect(entry).to_contain_text("3 / s, burst 6")
    save_screenshot(page, "changelog-scheduled-version-cancelled")
    feed = page.request.get("/changelog/feed.atom").text()
    assert feed.count("cancelled ·") == 1
