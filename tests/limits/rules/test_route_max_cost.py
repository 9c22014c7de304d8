"""A route's ``max_cost``: saved through the services, compiled, said in words by the
diff, and carried by rules as code."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse

from limits.ascode.services import rules_export, rules_file_diff, rules_file_read
from limits.core.audit import Actor
from limits.diff.diffing import rules_diff
from limits.diff.kinds import ChangeKind
from limits.models import Route as RouteRow
from limits.publishing.services import snapshot_publish
from limits.rules import services
from limits.versions.selectors import snapshot_rules
from sluice import Dimension, Limit, Policy, Route, Rules
from sluice.rulesfile import rules_from_yaml

pytestmark = pytest.mark.django_db

SYSTEM = Actor.system("test")


def _rules(max_cost: int | None) -> Rules:
    route = Route("search", ("GET",), "/v1/search", 1, max_cost=max_cost)
    return Rules(
        tiers={"pro": "Pro"},
        tenants={"acme": "pro"},
        routes={"search": route},
        policies=(Policy("default", "*", (Limit(Dimension.IP, 10, 1, 100),)),),
    )


@pytest.mark.parametrize(
    ("before", "after", "kind", "words"),
    [
        (None, 50, ChangeKind.LOWERED, "requests may now declare a cost up to 50"),
        (50, 80, ChangeKind.LOWERED, "up to 80 (was 50)"),
        (50, 20, ChangeKind.RAISED, "up to 20 (was 50)"),
        (50, None, ChangeKind.LOWERED, "requests may no longer declare a cost"),
    ],
    ids=["allowed", "raised", "lowered", "dropped"],
)
def test_rules_diff__max_cost_moved__said_in_words(before, after, kind, words):
    # When a route's max cost moves
    (change,) = rules_diff(_rules(before), _rules(after)).changes
    # Then the change says so in words, and a dearer possible request is a lowering
    assert change.text.startswith("route search: ")
    assert words in change.text
    assert change.kind == kind


def test_rule_save__max_cost_below_cost__refused_on_the_field(rules):
    route = rules["orders"]  # cost 2
    route.max_cost = 1
    with pytest.raises(ValidationError) as raised:
        services.rule_save(obj=route, actor=SYSTEM)
    assert "below the route's cost" in raised.value.message_dict["max_cost"][0]


def test_rule_save__max_cost_above_a_burst__refused_naming_the_policy(rules):
    # Given the free tier's policy for all routes, 10 deep
    route = rules["search"]
    # When search would take declared costs up to 11
    route.max_cost = 11
    with pytest.raises(ValidationError) as raised:
        services.rule_save(obj=route, actor=SYSTEM)
    # Then the field is refused, naming the policy that could never admit it
    assert "tier free · all routes" in raised.value.message_dict["max_cost"][0]


@pytest.fixture
def bounded(rules, settings):
    """The active version lets search requests declare a cost up to 8."""
    settings.SLUICE_NOTICE_PERIOD_DAYS = 0
    snapshot_publish(actor=SYSTEM, message="before")
    route = rules["search"]
    route.max_cost = 8
    services.rule_save(obj=route, actor=SYSTEM)
    return snapshot_publish(actor=SYSTEM, message="declared costs")


def test_publish__max_cost__in_the_snapshot_and_its_diff(bounded):
    # Then gateways get the bound, and the version's diff says it in words
    assert snapshot_rules(bounded).routes["search"].max_cost == 8
    texts = [c["text"] for c in bounded.diff["changes"]]
    assert "route search: requests may now declare a cost up to 8" in texts


def test_rules_file__max_cost__exported_and_read_by_both_sides(bounded):
    # Given the export of that version
    text = rules_export()
    # Then the route carries its bound, and both sides read it back unchanged
    assert "max_cost: 8" in text
    assert rules_file_diff(rules_file_read(text)).equal
    assert rules_from_yaml(text).routes["search"].max_cost == 8
    # And a route without one writes none: files of such routes keep their shape
    assert text.count("max_cost") == 1


def test_admin_route_add__max_cost_below_cost__error_on_the_field(client, product_user):
    # Given a product person in the admin
    client.force_login(product_user)
    form = {
        "slug": "reports",
        "methods": "POST",
        "path_pattern": "/v1/reports",
        "cost": "5",
        "max_cost": "4",
        "failure_mode": "open",
    }
    # When a route is added whose max cost is below its cost
    response = client.post(reverse("admin:limits_route_add"), form)
    # Then the form says why, and nothing is saved
    assert response.status_code == 200
    assert "below the route&#x27;s cost" in response.content.decode()
    assert not RouteRow.objects.filter(slug="reports").exists()
