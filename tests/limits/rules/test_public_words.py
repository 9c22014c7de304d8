"""A limit's public name and description, and the documentation link: from the rule
tables and settings into the published snapshot, as gateways carry them to a 429."""

from __future__ import annotations

import pytest

from limits.core.audit import Actor
from limits.models import Limit
from limits.publishing.problems import InvalidRules
from limits.publishing.services import snapshot_publish
from limits.rules.documents import limit_document, limit_value
from limits.versions.selectors import snapshot_document


def test_publish__public_words_and_documentation__carried_in_the_snapshot(
    rules, settings
):
    # Given free's limit has public words, and a documentation link is set
    Limit.objects.filter(policy__tier=rules["free"]).update(
        public_name="Free plan", public_description="5 calls a second"
    )
    settings.SLUICE_DOCUMENTATION_URL = "https://docs.example.com/limits"
    # When published
    row = snapshot_publish(actor=Actor.system(), message="words")
    # Then the snapshot carries them, and the other limits have none
    document = snapshot_document(row)
    assert document.rules.documentation == "https://docs.example.com/limits"
    free = next(p for p in document.rules.policies if p.scope == "tier:free")
    assert (free.limits[0].name, free.limits[0].description) == (
        "Free plan",
        "5 calls a second",
    )
    pro = next(p for p in document.rules.policies if p.scope == "tier:pro")
    assert (pro.limits[0].name, pro.limits[0].description) == ("", "")


def test_publish__documentation_not_a_link__refused_with_the_field(rules, settings):
    settings.SLUICE_DOCUMENTATION_URL = "docs.example.com"
    with pytest.raises(InvalidRules) as caught:
        snapshot_publish(actor=Actor.system(), message="bad link")
    assert "documentation" in str(caught.value)


def test_limit_document__public_words__round_trip_and_absent_when_not_set(rules):
    row = Limit.objects.filter(policy__tier=rules["free"]).get()
    plain = limit_document(row.to_value())
    assert "public_name" not in plain
    row.public_name, row.public_description = "Free plan", "5 calls a second"
    worded = limit_document(row.to_value())
    assert worded["public_name"] == "Free plan"
    assert limit_value(worded) == row.to_value()
