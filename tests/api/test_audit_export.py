"""An auditor can verify the chain from the API alone, without database access."""

from __future__ import annotations

from datetime import datetime

import pytest

from limits.core.audit import Actor
from limits.core.chain import chain_verify
from limits.models import Tier
from limits.rules import services as rule_services
from tests.api.conftest import ApiClient

pytestmark = pytest.mark.django_db


def _export(api) -> list[dict]:
    entries, url = [], "/api/v1/audit?limit=100"
    while url:
        page = api.get(url).json()
        entries += page["results"]
        url = page["next"]
    return sorted(entries, key=lambda entry: entry["id"])


def test_audit_api__exported_entries__verify_outside_the_database(viewer_user):
    # Given a few changes, read through the API by a viewer
    for slug in ("gold", "silver", "bronze"):
        rule_services.rule_save(obj=Tier(slug=slug, name=slug), actor=Actor.system())
    exported = _export(ApiClient().as_user(viewer_user))
    for entry in exported:
        entry["created_at"] = datetime.fromisoformat(entry["created_at"])
    # When an auditor walks the exported chain / Then it verifies to the same head
    assert chain_verify(exported) == chain_verify()
    assert chain_verify(exported).verified == 3
    # And an exported entry edited afterwards is named
    exported[1]["after"]["name"] = "platinum"
    assert chain_verify(exported).broken_id == exported[1]["id"]
