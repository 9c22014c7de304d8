"""Change requests: exactly their edits on top of the active version, with approval."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from limits.announcements.services import announcement_notify
from limits.changes.publishing import ChangeConflict, change_request_publish
from limits.changes.services import (
    EditsInvalid,
    Proposal,
    change_request_approve,
    change_request_discard_edit,
    change_request_open,
    change_request_propose,
    change_request_rebase,
)
from limits.core.audit import Actor
from limits.models import (
    AuditEntry,
    ChangeRequestState,
    Limit,
    Policy,
    Snapshot,
    Tenant,
)
from limits.publishing.approval import ApprovalRequired
from limits.publishing.services import snapshot_publish
from limits.rules.documents import document_in
from limits.versions.selectors import snapshot_get_active, snapshot_rules
from sluice.rules import format_time
from tests.factories import UserFactory

SYSTEM = Actor.system("test")


def _actor(user) -> Actor:
    return Actor(user=user, request_id="test", ip="127.0.0.1")


def _override(tenant="initech", route="search", *, rate=50, burst=100, days=3):
    expires = format_time(timezone.now() + timedelta(days=days))
    return Proposal(
        "policy",
        "",
        {
            "scope": f"tenant:{tenant}",
            "route": route,
            "expires_at": expires,
            "reason": "Launch week, ticket 4711",
            "limits": [
                {
                    "dimension": "tenant",
                    "rate": rate,
                    "period": "second",
                    "burst": burst,
                }
            ],
        },
    )


def _pro_search(rate, burst) -> Proposal:
    return Proposal(
        "policy",
        "tier:pro/search",
        {
            "scope": "tier:pro",
            "route": "search",
            "limits": [
                {
                    "dimension": "tenant",
                    "rate": rate,
                    "period": "second",
                    "burst": burst,
                }
            ],
        },
    )


@pytest.fixture
def active(rules):
    return snapshot_publish(actor=SYSTEM, message="v1")


@pytest.fixture
def second_product(db):
    return UserFactory(username="quinn-product", role="product")


def test_publish__unrelated_working_copy_edit__only_the_requests_edits_are_published(
    rules, active, support
):
    # Given a lowering sitting in the working copy, unpublished
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=20, burst=40)
    # When support opens and publishes a temporary raise for initech
    request = change_request_open(actor=_actor(support), proposals=[_override()])
    published = change_request_publish(change_request=request, actor=_actor(support))
    # Then the new version is the active one plus the override, without the lowering
    new = snapshot_rules(published.version)
    old = snapshot_rules(active)
    assert published.version == snapshot_get_active()
    assert {p.key for p in new.policies} - {p.key for p in old.policies} == {
        ("tenant:initech", "search", True)
    }
    pro = next(p for p in new.policies if p.key == ("tier:pro", "search", False))
    assert pro.limits[0].rate == 50
    # And the override is in the rule tables, the working copy's lowering still there
    assert Policy.objects.filter(
        tenant__slug="initech", expires_at__isnull=False
    ).exists()
    assert Limit.objects.get(policy=rules["pro_search"]).rate == 20
    request.refresh_from_db()
    assert (request.state, request.published_version) == ("published", 2)


def test_publish__object_changed_underneath__conflict_in_words_and_nothing_stored(
    rules, active, product, second_product
):
    # Given a request raising pro search, made against version 1
    request = change_request_open(
        actor=_actor(product), proposals=[_pro_search(80, 160)]
    )
    # And another one on the same policy published meanwhile
    other = change_request_open(
        actor=_actor(second_product), proposals=[_pro_search(70, 140)]
    )
    change_request_publish(change_request=other, actor=_actor(second_product))
    # When the first is published
    with pytest.raises(ChangeConflict) as refused:
        change_request_publish(change_request=request, actor=_actor(product))
    # Then the conflict says what changed, and no version was stored for it
    text = refused.value.messages[0]
    assert "policy tier pro · search changed since this request was made" in text
    assert "per tenant: 50 / s, burst 100" in text
    assert "version 2 has per tenant: 70 / s, burst 140" in text
    assert Snapshot.objects.count() == 2
    # When it is rebased, it publishes on top of what is there now
    change_request_rebase(change_request=request, actor=_actor(product))
    published = change_request_publish(change_request=request, actor=_actor(product))
    pro = next(
        p
        for p in snapshot_rules(published.version).policies
        if p.key == ("tier:pro", "search", False)
    )
    assert (pro.limits[0].rate, published.version.version) == (80, 3)


def test_lowering__needs_a_second_product_person__not_self_not_support(
    rules, active, product, support, second_product, settings
):
    settings.SLUICE_NOTICE_PERIOD_DAYS = 0
    # Given product's request lowering pro search
    request = change_request_open(
        actor=_actor(product), proposals=[_pro_search(20, 40)], reason="Costs"
    )
    assert request.lowers
    # When it is published without approval, Then it is refused and says why
    with pytest.raises(ApprovalRequired) as refused:
        change_request_publish(change_request=request, actor=_actor(product))
    assert "it lowers limits" in refused.value.messages[0]
    # And nobody approves their own, nor does support
    with pytest.raises(PermissionDenied, match="own"):
        change_request_approve(change_request=request, actor=_actor(product))
    with pytest.raises(PermissionDenied, match="product role"):
        change_request_approve(change_request=request, actor=_actor(support))
    # When a second product person approves, Then it publishes
    change_request_approve(change_request=request, actor=_actor(second_product))
    published = change_request_publish(change_request=request, actor=_actor(product))
    assert published.version.version == 2
    actions = list(
        AuditEntry.objects.filter(object_type="changerequest").values_list(
            "action", flat=True
        )
    )
    assert sorted(actions) == ["approve", "create", "update"]


def test_approval__edits_change_after_it__no_longer_counts(
    rules, active, product, second_product, settings
):
    settings.SLUICE_NOTICE_PERIOD_DAYS = 0
    request = change_request_open(
        actor=_actor(product), proposals=[_pro_search(20, 40), _override()]
    )
    change_request_approve(change_request=request, actor=_actor(second_product))
    # When an edit is dropped after the approval
    change_request_discard_edit(
        change_request=request,
        subject="policy",
        key="tenant:initech/search~",
        actor=_actor(product),
    )
    # Then the approval was for another revision: it needs one again
    with pytest.raises(ApprovalRequired):
        change_request_publish(change_request=request, actor=_actor(product))


def test_reach__more_than_n_tenants__needs_approval(rules, active, product, settings):
    settings.SLUICE_APPROVAL_TENANTS = 0
    # Given a raise of the pro tier on search (acme: globex has its own policy)
    request = change_request_open(
        actor=_actor(product), proposals=[_pro_search(60, 120)]
    )
    assert (request.lowers, request.reach) == (False, 1)
    with pytest.raises(ApprovalRequired, match=r"reaches 1 tenant \(more than 0\)"):
        change_request_publish(change_request=request, actor=_actor(product))


@pytest.mark.parametrize(
    ("count_new", "needs_approval"), [(False, False), (True, True)]
)
def test_reach__onboarding_tenants__counts_only_when_the_setting_says(
    rules, active, product, settings, count_new, needs_approval
):
    settings.SLUICE_APPROVAL_TENANTS = 2
    settings.SLUICE_APPROVAL_NEW_TENANTS = count_new
    # Given 3 new tenants (more than 2) on tier pro: no one's limits go down
    proposals = [
        Proposal("tenant", f"new-{n}", {"name": f"New {n}", "tier": "pro"})
        for n in range(3)
    ]
    request = change_request_open(actor=_actor(product), proposals=proposals)
    # When product publishes it without a second person
    if needs_approval:
        with pytest.raises(ApprovalRequired, match=r"reaches 3 tenants"):
            change_request_publish(change_request=request, actor=_actor(product))
        return
    # Then onboarding needs no approval by default
    published = change_request_publish(change_request=request, actor=_actor(product))
    assert published.version is not None


def test_support__publishes_own_override__not_product_requests_nor_tier_policies(
    rules, active, support, product
):
    # Support cannot propose anything but overrides
    with pytest.raises(PermissionDenied, match="overrides only"):
        change_request_open(actor=_actor(support), proposals=[_pro_search(60, 120)])
    # Nor publish product's requests
    theirs = change_request_open(actor=_actor(product), proposals=[_override("acme")])
    with pytest.raises(PermissionDenied, match="its own"):
        change_request_publish(change_request=theirs, actor=_actor(support))
    # But publishes its own override, approval-free
    own = change_request_open(actor=_actor(support), proposals=[_override()])
    assert change_request_publish(change_request=own, actor=_actor(support)).version


@pytest.mark.parametrize(
    ("change", "member", "message"),
    [
        ({"expires_at": "2099-01-01T00:00:00Z"}, "expires_at", "at most 90 days"),
        ({"reason": ""}, "reason", "needs a reason"),
        ({"limits": [{"dimension": "tenant", "rate": 0}]}, "limits[0]", "missing"),
        ({"route": "nowhere"}, "route", "unknown route"),
    ],
)
def test_open__bad_edit__field_error_naming_the_member(
    rules, active, support, change, member, message
):
    proposal = _override()
    bad = Proposal(proposal.subject, "", {**proposal.after, **change})
    with pytest.raises(EditsInvalid) as refused:
        change_request_open(actor=_actor(support), proposals=[bad])
    said = [m for m in refused.value.messages if message in m]
    assert said, refused.value.messages
    assert said[0].startswith("edit 1, policy tenant:initech/")
    assert member in said[0]


def test_propose__admin_drafts__collect_in_one_draft_per_person(rules, active, product):
    first = change_request_propose(actor=_actor(product), proposals=[_override()])
    second = change_request_propose(
        actor=_actor(product), proposals=[_override("acme")]
    )
    assert first.pk == second.pk
    assert first.state == ChangeRequestState.DRAFT
    assert second.edits.count() == 2
    # An edit set back to what the active version has drops out
    same = document_in(snapshot_rules(active), "policy", "tier:pro/search")
    change_request_propose(
        actor=_actor(product),
        proposals=[_pro_search(60, 120), Proposal("policy", "tier:pro/search", same)],
    )
    assert second.edits.count() == 2


def test_publish__scheduled_lowering_pending__carried_into_it_not_cancelled(
    rules, active, support
):
    # Given a lowering of pro search published to take effect in 15 days, announced
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=20, burst=40)
    later = timezone.now() + timedelta(days=15)
    lowering = snapshot_publish(actor=SYSTEM, message="Lower pro", effective_at=later)
    announcement_notify(announcement_id=lowering.announcement.pk)
    lowering.announcement.refresh_from_db()
    # When support publishes a raise for acme now
    request = change_request_open(actor=_actor(support), proposals=[_override("acme")])
    published = change_request_publish(change_request=request, actor=_actor(support))
    # Then the raise is active, and the lowering is re-issued with the raise in it
    (carried,) = published.carried
    lowering.refresh_from_db()
    assert lowering.superseded_by == carried.version
    assert carried.effective_at == lowering.effective_at
    assert carried.parent_version == published.version.version
    rules_then = snapshot_rules(carried)
    keys = {p.key for p in rules_then.policies}
    assert ("tenant:acme", "search", True) in keys
    pro = next(p for p in rules_then.policies if p.key == ("tier:pro", "search", False))
    assert (pro.limits[0].rate, pro.limits[0].burst) == (20, 40)
    # And tenants are not told again: the re-issue continues the announcement
    announcement = carried.announcement
    assert announcement.notified_at == lowering.announcement.notified_at
    assert carried.diff["lowers"] is True
    request.refresh_from_db()
    assert request.carried_versions == [carried.version]


def test_publish__only_what_snapshots_do_not_carry__tables_changed_no_version(
    rules, active, product
):
    acme = document_in(snapshot_rules(active), "tenant", "acme")
    proposal = Proposal("tenant", "acme", {**acme, "name": "ACME Corporation"})
    request = change_request_open(actor=_actor(product), proposals=[proposal])
    published = change_request_publish(change_request=request, actor=_actor(product))
    assert published.version is None
    assert Tenant.objects.get(slug="acme").name == "ACME Corporation"
    assert Snapshot.objects.count() == 1


def test_snapshot_publish__person_publishes_a_lowering_directly__pointed_to_a_request(
    rules, active, publisher, settings
):
    settings.SLUICE_NOTICE_PERIOD_DAYS = 0
    Limit.objects.filter(policy=rules["pro_search"]).update(rate=20, burst=40)
    with pytest.raises(ApprovalRequired, match="change request"):
        snapshot_publish(actor=publisher, message="Lower pro")
    # The system (manage.py publish) is not held by it
    assert snapshot_publish(actor=SYSTEM, message="Lower pro").version == 2


def test_open__nothing_differs__refused(rules, active, product):
    same = document_in(snapshot_rules(active), "policy", "tier:pro/search")
    with pytest.raises(ValidationError, match="Nothing to change"):
        change_request_open(
            actor=_actor(product),
            proposals=[Proposal("policy", "tier:pro/search", same)],
        )


def test_publish__emergency_by_support__refused_nothing_published(
    rules, active, support
):
    # Given support's own override request (support may publish it)
    request = change_request_open(actor=_actor(support), proposals=[_override()])
    # When support publishes it as an emergency / Then refused: the product role's call
    with pytest.raises(PermissionDenied, match="emergency"):
        change_request_publish(
            change_request=request, actor=_actor(support), emergency_reason="Now!"
        )
    request.refresh_from_db()
    assert (request.state, Snapshot.objects.count()) == (ChangeRequestState.OPEN, 1)
