"""The public changelog: HTML, JSON and Atom, readable by anyone, private changes left out."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import timedelta

import pytest
from django.utils import timezone

from limits.choices import ScopeKind
from limits.core.audit import Actor
from limits.models import Limit
from limits.publishing.services import snapshot_publish
from tests.factories import PolicyFactory, TierFactory
from tests.limits.announce_fixtures import lower_pro_search

SYSTEM = Actor.system("test")
ATOM = "{http://www.w3.org/2005/Atom}"
PRIVATE = ("globex", "acme", "initech", "9999", "Launch week", "override")


@pytest.fixture
def history(rules, published):
    """Version 2: a private override for acme and a raise on globex's own policy;
    version 3 (upcoming, in 15 days): pro search lowered, with a public note."""
    PolicyFactory(
        override=True,
        tenant=rules["acme"],
        route=rules["search"],
        limit__rate=9999,
        limit__burst=9999,
    )
    Limit.objects.filter(policy__tenant=rules["globex"]).update(rate=3000, burst=6000)
    snapshot_publish(actor=SYSTEM, message="Acme launch override")
    lower_pro_search(rules)
    return snapshot_publish(
        actor=SYSTEM,
        message="Lower pro search for acme and friends",
        effective_at=timezone.now() + timedelta(days=15),
        note="Pro search moves to 20 requests per second.",
    )


def test_changelog_json__private_changes__left_out_and_upcoming_marked(client, history):
    # Given a history with private and public changes / When anyone reads the JSON
    response = client.get("/changelog/changes.json")
    # Then it answers without login, newest effective time first, the upcoming one marked
    assert response.status_code == 200
    versions = response.json()["versions"]
    assert [v["version"] for v in versions] == [3, 1]  # 2 has nothing public
    upcoming = versions[0]
    assert (upcoming["status"], upcoming["emergency"]) == ("upcoming", False)
    assert upcoming["note"] == "Pro search moves to 20 requests per second."
    assert upcoming["changes"] == [
        {
            "subject": "policy",
            "kind": "lowered",
            "direction": None,
            "lowers": True,
            "text": "tier pro · search: per tenant: 50 / s, burst 100 → 20 / s, burst 40",
            "tiers": ["pro"],
            "anonymous": False,
        }
    ]
    assert versions[1]["status"] == "past"  # version 2 (private) is in effect
    # And no tenant's name, override or own policy leaks anywhere
    body = response.content.decode()
    assert not [word for word in PRIVATE if word in body]
    changes = [c for v in versions for c in v["changes"]]
    assert {c["subject"] for c in changes} <= {"tier", "route", "policy"}
    assert not [c for c in changes if c["text"].startswith("tenant ")]


def test_changelog_page__anonymous__changes_in_words_nothing_private(client, history):
    # Given the same history / When anyone opens the page
    html = client.get("/changelog/").content.decode()
    # Then it shows the lowered change, its effective date, upcoming, and the feed link
    assert "tier pro · search: per tenant: 50 / s, burst 100 → 20 / s, burst 40" in html
    assert "upcoming" in html
    assert f"{history.effective_at:%Y-%m-%d %H:%M} UTC" in html
    assert 'type="application/atom+xml"' in html
    assert html.index("Version 3") < html.index("Version 1")
    assert not [word for word in PRIVATE if word in html]
    # And a version with nothing public has no page
    assert client.get("/changelog/2/").status_code == 404
    assert client.get("/changelog/3/").status_code == 200


def test_changelog_feed__atom__one_entry_per_public_version(client, history):
    # Given the same history / When a feed reader fetches the feed
    response = client.get("/changelog/feed.atom")
    # Then it is Atom, one entry per version with public changes, nothing private
    assert response["Content-Type"].startswith("application/atom+xml")
    feed = ET.fromstring(response.content)
    entries = feed.findall(f"{ATOM}entry")
    titles = [entry.find(f"{ATOM}title").text for entry in entries]
    assert titles[0].startswith("Sluice · upcoming · Version 3, effective ")
    assert titles[1].startswith("Sluice · Version 1, effective ")
    content = entries[0].find(f"{ATOM}summary").text
    assert "20 / s, burst 40" in content
    assert not [word for word in PRIVATE if word in response.content.decode()]


def test_changelog__emergency__marked_in_page_json_and_feed(client, rules, published):
    # Given a tier lowering published now as an emergency
    lower_pro_search(rules)
    snapshot_publish(actor=SYSTEM, message="m", emergency_reason="Overload")
    # When the changelog is read / Then every format marks it, without the reason
    assert client.get("/changelog/changes.json").json()["versions"][0]["emergency"]
    assert "Emergency change" in client.get("/changelog/").content.decode()
    feed = client.get("/changelog/feed.atom").content.decode()
    assert "EMERGENCY · Version 2" in feed
    assert "Overload" not in feed


def test_changelog__default_policy_change__public_with_tiers_it_reaches(
    client, rules, published
):
    # Given a tier without policies of its own, and a new default policy on search
    TierFactory(slug="startup")
    PolicyFactory(
        scope=ScopeKind.DEFAULT, route=rules["search"], limit__rate=3, limit__burst=6
    )
    snapshot_publish(
        actor=SYSTEM, message="m", effective_at=timezone.now() + timedelta(days=20)
    )
    # When the JSON is read / Then the change is public, with the tiers it reaches
    versions = client.get("/changelog/changes.json").json()["versions"]
    texts = {c["text"]: c for c in versions[0]["changes"]}
    change = next(c for t, c in texts.items() if t.startswith("new policy default"))
    assert change["tiers"] == ["startup"]  # free and pro have policies of their own
    assert change["anonymous"] is True


def test_changelog__bucket_becomes_sliding_window__said_in_the_windows_words(
    client, rules, published
):
    # Given pro search's bucket (50 / s, burst 100) becomes 3,000 in any minute
    Limit.objects.filter(
        policy__tier=rules["pro"], policy__route=rules["search"]
    ).update(kind="sliding_window", rate=3000, period=60, burst=None)
    snapshot_publish(
        actor=SYSTEM, message="m", effective_at=timezone.now() + timedelta(days=20)
    )
    # When the changelog is read
    (change,) = client.get("/changelog/changes.json").json()["versions"][0]["changes"]
    page = client.get("/changelog/").content.decode()
    # Then the window is said as one, the bucket it replaces as a bucket
    assert change["kind"] == "lowered"  # kinds do not compare: a change of kind lowers
    assert change["text"] == (
        "tier pro · search: no more limit per tenant: 50 / s, burst 100; "
        "new limit per tenant: 3,000 requests per minute, sliding window"
    )
    assert "3,000 requests per minute, sliding window" in page
