"""Fixtures of the announcement tests: a published baseline and a tenant's endpoint."""

from __future__ import annotations

import pytest

from limits.announcements.webhooks import webhook_endpoint_create
from limits.core.audit import Actor
from limits.models import Limit, WebhookEndpoint
from limits.publishing.services import snapshot_publish

SYSTEM = Actor.system("test")


@pytest.fixture
def published(rules):
    """Version 1 of the small rule set (tests/limits/conftest.py), active."""
    return snapshot_publish(actor=SYSTEM, message="First limits")


def lower_pro_search(rules, *, rate=20, burst=40) -> None:
    """Lower the pro tier on search (reaches acme; globex has its own policy)."""
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=rate, burst=burst)


def endpoint_for(tenant, url: str) -> tuple[WebhookEndpoint, str]:
    """A webhook endpoint of ``tenant`` at ``url``, and its secret."""
    endpoint = WebhookEndpoint(tenant=tenant, url=url)
    return endpoint, webhook_endpoint_create(endpoint=endpoint, actor=SYSTEM)
