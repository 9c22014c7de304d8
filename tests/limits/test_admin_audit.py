"""The audit entry page as a reviewer reads it: what changed, field by field, and
where the entry sits in the hash chain."""

from __future__ import annotations

import re
from html import unescape

import pytest
from django.urls import reverse

from limits.choices import AuditAction, ScopeKind
from limits.core.audit import Actor
from limits.core.audit_diff import SEPARATOR
from limits.models import AuditEntry, Policy
from limits.rules import services as rule_services

pytestmark = pytest.mark.django_db

SEP = SEPARATOR  # a right-pointing angle quote between a path's parts


def _rows(html: str) -> list[tuple[str, str, str]]:
    """The (field, before, after) rows of the page's change table."""
    table = re.search(r'<table class="sluice-audit-changes">(.*?)</table>', html, re.S)
    assert table, "no change table on the page"
    cells = re.findall(
        r"<tr><th scope=\"row\">(.*?)</th><td>(.*?)</td><td>(.*?)</td></tr>",
        table.group(1),
    )
    return [tuple(unescape(cell) for cell in row) for row in cells]


def test_audit_entry_page__limit_rate_edit__field_by_field_diff_and_hashes(
    client, product_user, rules
):
    # Given the free tier's rate changed from 5 to 3 and its burst from 10 to 6
    policy = Policy.objects.get(scope=ScopeKind.TIER, tier__slug="free", route=None)
    limit = policy.limits.get()
    limit.rate, limit.burst = 3, 6
    rule_services.limit_save(limit=limit, actor=Actor(user=product_user))
    entry = AuditEntry.objects.get(object_type="policy", action=AuditAction.UPDATE)
    # When a product person opens its page in the admin
    client.force_login(product_user)
    page = client.get(reverse("admin:limits_auditentry_change", args=[entry.pk]))
    html = page.content.decode()
    # Then it shows only what changed, nested limits by number, before and after
    assert page.status_code == 200
    assert _rows(html) == [
        (f"limits 1{SEP}burst", "10", "6"),
        (f"limits 1{SEP}rate", "5", "3"),
        (f"limits 1{SEP}revision", "1", "2"),
        ("revision", "1", "2"),
    ]
    # And the entry's place in the chain
    assert entry.hash in html
    assert entry.prev_hash in html
    assert "Hash chain" in html


def test_audit_entry_page__creation__every_field_after_none_before(
    client, product_user
):
    from limits.models import Tier

    rule_services.rule_save(
        obj=Tier(slug="gold", name="Gold"), actor=Actor(user=product_user)
    )
    entry = AuditEntry.objects.get(object_type="tier")
    client.force_login(product_user)
    html = client.get(
        reverse("admin:limits_auditentry_change", args=[entry.pk])
    ).content.decode()
    rows = dict((field, (before, after)) for field, before, after in _rows(html))
    assert rows["slug"] == ("—", "gold")
    assert rows["name"] == ("—", "Gold")
