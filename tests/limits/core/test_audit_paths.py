"""The audit log records what really changed, whichever path the change takes: the
admin's inline limits, bulk admin actions, the API, rules files, change-request
publishes and rollbacks. Each test reads the entry back and checks before and after."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command
from django.urls import reverse

from limits.ascode.services import rules_export
from limits.changes.publishing import change_request_publish
from limits.changes.services import Proposal, change_request_open
from limits.choices import AuditAction, ScopeKind
from limits.core.audit import Actor
from limits.core.chain import chain_verify
from limits.gateways.tokens import token_create
from limits.models import AuditEntry, ChangeRequest, GatewayToken, Policy
from limits.publishing.rollback import snapshot_rollback
from limits.publishing.services import snapshot_publish
from limits.rules.compiling import rules_compile
from limits.rules.documents import policy_document
from tests.api.conftest import ApiClient

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.usefixtures("no_notice_period", "no_approval_rule"),
]

SYSTEM = Actor.system("test")


@pytest.fixture
def published(rules):
    """The small working copy of the suite, published as version 1."""
    return snapshot_publish(actor=SYSTEM, message="v1")


def _free_policy() -> Policy:
    return Policy.objects.get(scope=ScopeKind.TIER, tier__slug="free", route=None)


def _policy_entries():
    policy = _free_policy()
    return AuditEntry.objects.filter(object_type="policy", object_id=str(policy.pk))


def _rates(state: dict | None) -> list[tuple[int, int]]:
    return [(limit["rate"], limit["burst"]) for limit in (state or {})["limits"]]


def _admin_form(page) -> dict:
    """The POST data of an admin change page as the browser would send it, unchanged."""
    data = {}
    forms = [page.context["adminform"].form]
    for inline in page.context["inline_admin_formsets"]:
        formset = inline.formset
        management = formset.management_form
        data.update(
            {f"{formset.prefix}-{k}": management[k].value() for k in management.fields}
        )
        forms += formset.forms
    for form in forms:
        for name, field in form.fields.items():
            value = form[name].value()
            if value is None or value is False:
                continue
            if (
                hasattr(field, "widget")
                and field.widget.__class__.__name__ == "SplitDateTimeWidget"
            ):
                continue
            data[form.add_prefix(name)] = value
    return data


def test_admin_inline_limit_edit__rate_5_to_3__before_5_after_3(
    client, product_user, published
):
    # Given the free tier's policy at 5 / s, burst 10, live as version 1
    client.force_login(product_user)
    url = reverse("admin:limits_policy_change", args=[_free_policy().pk])
    form = _admin_form(client.get(url))
    # When a product person sets its rate to 3 in the policy page's limits table
    form["limits-0-rate"] = "3"
    response = client.post(url, form)
    assert response.status_code == 302, response.content.decode()[:2000]
    # Then their draft change request records the edit from 5 to 3
    draft = ChangeRequest.objects.get(author=product_user)
    proposed = AuditEntry.objects.get(
        object_type="changerequest", object_id=str(draft.pk)
    )
    (edit,) = proposed.after["edits"]
    assert (_rates(edit["before"]), _rates(edit["after"])) == ([(5, 10)], [(3, 10)])
    # And publishing it records the policy's row going from 5 to 3, by that person
    change_request_publish(change_request=draft, actor=Actor(user=product_user))
    entry = _policy_entries().get(action=AuditAction.UPDATE)
    assert (_rates(entry.before), _rates(entry.after)) == ([(5, 10)], [(3, 10)])
    assert entry.actor == "pat-product"
    assert chain_verify().intact


def test_admin_bulk_revoke__two_tokens__each_entry_before_active_after_revoked(
    client, product_user
):
    # Given two gateway tokens
    tokens = [GatewayToken(name=f"gw-{n}") for n in (1, 2)]
    for token in tokens:
        token_create(token=token, actor=SYSTEM)
    client.force_login(product_user)
    # When both are revoked in one bulk action of the admin list
    client.post(
        reverse("admin:limits_gatewaytoken_changelist"),
        {"action": "revoke_selected", "_selected_action": [t.pk for t in tokens]},
    )
    # Then each has its own entry, from not revoked to the time it was revoked
    entries = AuditEntry.objects.filter(action=AuditAction.TOKEN_REVOKE)
    assert {e.object_id for e in entries} == {str(t.pk) for t in tokens}
    for entry in entries:
        stored = GatewayToken.objects.get(pk=entry.object_id)
        assert entry.before["revoked_at"] is None
        assert entry.after["revoked_at"].startswith(
            stored.revoked_at.strftime("%Y-%m-%dT%H:%M:%S")
        )
        assert entry.actor == "pat-product"


def test_admin_bulk_removal__never_published_tiers__each_deleted_with_its_state(
    client, product_user
):
    from tests.factories import TierFactory

    tiers = [TierFactory(slug=f"trial-{n}", name=f"Trial {n}") for n in (1, 2)]
    client.force_login(product_user)
    client.post(
        reverse("admin:limits_tier_changelist"),
        {"action": "propose_removal", "_selected_action": [t.pk for t in tiers]},
    )
    entries = AuditEntry.objects.filter(action=AuditAction.DELETE, object_type="tier")
    assert sorted((e.before["slug"], e.after) for e in entries) == [
        ("trial-1", None),
        ("trial-2", None),
    ]


def test_api_limit_patch__rate_5_to_3__before_5_after_3(product_user, rules):
    # Given the free tier's limit at 5 / s
    limit = _free_policy().limits.get()
    api = ApiClient().as_user(product_user)
    # When its rate is patched through the API
    response = api.patch(
        f"/api/v1/limits/{limit.pk}",
        {"rate": 3},
        format="json",
        HTTP_IF_MATCH=f'"r{limit.revision}"',
    )
    assert response.status_code == 200, response.content
    # Then the policy's entry goes from 5 to 3
    entry = _policy_entries().get(action=AuditAction.UPDATE)
    assert (_rates(entry.before), _rates(entry.after)) == ([(5, 10)], [(3, 10)])
    assert entry.actor == "pat-product"


def test_rules_apply_command__file_lowers_free__before_5_after_3(published, tmp_path):
    # Given a rules file where the free tier's rate is 3 instead of 5
    path = tmp_path / "rules.yaml"
    path.write_text(
        rules_export().replace(
            "{dimension: tenant, rate: 5, period: second, burst: 10}",
            "{dimension: tenant, rate: 3, period: second, burst: 10}",
        )
    )
    # When the command loads and publishes it
    call_command("rules", "apply", str(path), "--publish", stdout=StringIO())
    # Then the policy's entry goes from 5 to 3, by the command
    entry = _policy_entries().get(action=AuditAction.UPDATE)
    assert (_rates(entry.before), _rates(entry.after)) == ([(5, 10)], [(3, 10)])
    assert entry.actor.startswith("manage.py rules")


def test_change_request_publish__api_opened_request__before_and_after_of_the_row(
    published, product_user
):
    # Given a change request that doubles the free tier's burst
    document = policy_document(
        next(p for p in rules_compile().policies if p.scope == "tier:free")
    )
    document["limits"][0]["burst"] = 20
    request = change_request_open(
        actor=Actor(user=product_user),
        proposals=[Proposal("policy", "tier:free/*", document)],
    )
    # When it is published
    change_request_publish(change_request=request, actor=Actor(user=product_user))
    # Then the policy's row is recorded from burst 10 to 20
    entry = _policy_entries().get(action=AuditAction.UPDATE)
    assert (_rates(entry.before), _rates(entry.after)) == ([(5, 10)], [(5, 20)])
    assert entry.reason.startswith(f"change request #{request.pk}")


def test_rollback__to_version_1__rows_recorded_from_version_2_back_to_1(
    published, product_user
):
    # Given version 2, where the free tier's rate is 3
    limit = _free_policy().limits.get()
    limit.rate = 3
    limit.save()
    snapshot_publish(actor=SYSTEM, message="v2")
    # When product rolls back to version 1
    snapshot_rollback(actor=Actor(user=product_user), version=1, message="undo")
    # Then the policy's row is recorded going from 3 back to 5
    entry = _policy_entries().get(reason="rollback to version 1: undo")
    assert (_rates(entry.before), _rates(entry.after)) == ([(3, 10)], [(5, 10)])
    assert chain_verify().intact
