"""The rule services: validation by field, optimistic concurrency, and audit in the same transaction."""

from datetime import timedelta

import pytest
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import (
    IntegrityError,
    InternalError,
    ProgrammingError,
    connection,
    transaction,
)
from django.utils import timezone

from limits.choices import AuditAction, Dimension, ScopeKind
from limits.core.audit import Actor, StaleRevision
from limits.models import AuditEntry, Limit, Policy, Route, Tenant, Tier
from limits.rules import services as rules
from tests.factories import (
    PolicyFactory,
    RouteFactory,
    TenantFactory,
    TierFactory,
)

pytestmark = pytest.mark.django_db


@pytest.fixture
def product(product_user):
    return Actor(user=product_user, request_id="req-1", ip="203.0.113.9")


@pytest.fixture
def support(support_user):
    return Actor(user=support_user, request_id="req-2", ip="203.0.113.10")


def test_rule_save__new_tenant__created_and_audited_with_actor(product):
    # Given a tier / When a product person creates a tenant
    tier = TierFactory(slug="pro")
    tenant = rules.rule_save(
        obj=Tenant(slug="acme", name="Acme", tier=tier), actor=product
    )
    # Then the audit log says who, from where, and what it became
    entry = AuditEntry.objects.get(object_type="tenant", object_id=str(tenant.pk))
    assert (entry.action, entry.actor, entry.request_id, entry.source_ip) == (
        AuditAction.CREATE,
        "pat-product",
        "req-1",
        "203.0.113.9",
    )
    assert entry.before is None
    assert entry.after["slug"] == "acme"
    assert entry.after["tier"] == "pro"


def test_rule_save__update__records_before_and_after_and_bumps_revision(product):
    tier = rules.rule_save(obj=Tier(slug="free", name="Free"), actor=product)
    tier.name = "Free forever"
    rules.rule_save(obj=tier, actor=product, expected_revision=1)
    entry = AuditEntry.objects.filter(action=AuditAction.UPDATE).get()
    assert (entry.before["name"], entry.after["name"]) == ("Free", "Free forever")
    assert Tier.objects.get(pk=tier.pk).revision == 2


def test_rule_save__stale_revision__refused_and_nothing_written(product):
    # Given a tier someone else changed since it was read (revision 2)
    tier = rules.rule_save(obj=Tier(slug="free", name="Free"), actor=product)
    tier.name = "B"
    rules.rule_save(obj=tier, actor=product)
    # When saving with the revision read earlier
    stale = Tier.objects.get(pk=tier.pk)
    stale.name = "C"
    with pytest.raises(StaleRevision) as raised:
        rules.rule_save(obj=stale, actor=product, expected_revision=1)
    # Then the write is refused and the stored row is untouched
    assert raised.value.current == 2
    assert Tier.objects.get(pk=tier.pk).name == "B"
    assert AuditEntry.objects.filter(object_type="tier").count() == 2


@pytest.mark.parametrize(
    ("fields", "field", "words"),
    [
        ({"path_pattern": "v1/search"}, "path_pattern", "must start with '/'"),
        ({"path_pattern": "/v1/{id"}, "path_pattern", "not a parameter"),
        ({"path_pattern": "/v1//x"}, "path_pattern", "empty"),
        ({"path_pattern": "/v1/{id}/{id}"}, "path_pattern", "appears twice"),
        ({"cost": 0}, "cost", "at least 1"),
        ({"slug": "Bad Slug"}, "slug", "lower-case"),
        ({"methods": ["FETCH"]}, "methods", "Not an HTTP method: 'FETCH'"),
        ({"methods": ["GET", "%d"]}, "methods", "Not an HTTP method: '%D'"),
    ],
)
def test_rule_save__bad_route__field_error_names_the_problem(
    product, fields, field, words
):
    route = Route(
        **{"slug": "search", "methods": ["GET"], "path_pattern": "/v1/search", **fields}
    )
    with pytest.raises(ValidationError) as raised:
        rules.rule_save(obj=route, actor=product)
    assert words in " ".join(raised.value.message_dict[field])
    assert not Route.objects.exists()
    assert not AuditEntry.objects.exists()


def test_rule_save__route_cost_above_a_burst__refused_naming_the_policy(product):
    # Given a tier policy for all routes whose burst is 5
    route = RouteFactory(slug="search", cost=1)
    PolicyFactory(tier=TierFactory(slug="free"), limit__burst=5)
    # When the route's cost is raised to 10
    route.cost = 10
    with pytest.raises(ValidationError) as raised:
        rules.rule_save(obj=route, actor=product)
    # Then the error names the policy whose bucket could never admit it
    assert "tier free · all routes" in raised.value.message_dict["cost"][0]


def test_rule_delete__tier_still_used__refused_with_who_uses_it(product):
    tier = TierFactory(slug="pro")
    TenantFactory(slug="acme", tier=tier)
    with pytest.raises(ValidationError) as raised:
        rules.rule_delete(obj=tier, actor=product)
    assert "acme" in raised.value.messages[0]
    assert Tier.objects.filter(pk=tier.pk).exists()
    assert not AuditEntry.objects.filter(action=AuditAction.DELETE).exists()


def test_rule_delete__route__deleted_and_audited_with_its_last_state(product):
    route = RouteFactory(slug="search")
    rules.rule_delete(obj=route, actor=product, reason="retired")
    entry = AuditEntry.objects.get(action=AuditAction.DELETE)
    assert (entry.object_repr, entry.before["slug"], entry.after, entry.reason) == (
        "search",
        "search",
        None,
        "retired",
    )


def _policy(**fields):
    return Policy(
        **{"scope": ScopeKind.TIER, "tier": TierFactory(slug="pro"), **fields}
    )


def test_policy_save__new_policy_with_limits__saved_and_audited_together(product):
    route = RouteFactory(slug="search")
    policy = rules.policy_save(
        policy=_policy(route=route),
        limits=[Limit(dimension=Dimension.TENANT, rate=50, burst=100)],
        actor=product,
    )
    entry = AuditEntry.objects.get(object_type="policy")
    assert entry.after["limits"][0]["rate"] == 50
    assert str(policy) == "tier pro · search"


def test_policy_save__replacing_limits__removes_the_ones_left_out(product):
    policy = rules.policy_save(
        policy=_policy(),
        limits=[
            Limit(dimension=Dimension.TENANT, rate=5, burst=10),
            Limit(dimension=Dimension.USER, rate=1, burst=2),
        ],
        actor=product,
    )
    keep = policy.limits.get(dimension=Dimension.TENANT)
    keep.rate = 7
    rules.policy_save(policy=policy, limits=[keep], actor=product, expected_revision=1)
    assert [(limit.dimension, limit.rate) for limit in policy.limits.all()] == [
        ("tenant", 7)
    ]
    update = AuditEntry.objects.get(action=AuditAction.UPDATE)
    assert len(update.before["limits"]) == 2
    assert len(update.after["limits"]) == 1


@pytest.mark.parametrize(
    ("policy_fields", "limits", "field", "words"),
    [
        ({}, [dict(rate=5, burst=3, cost=4)], "limits", "burst"),
        ({}, [dict(rate=5, burst=10, shadow=True)], "limits", "unlimited"),
        ({}, [dict(rate=5, burst=10), dict(rate=9, burst=10)], "limits", "same period"),
        ({}, [dict(rate=0, burst=10)], "limits", "at least 1"),
        ({"expires_at": "past"}, [dict(rate=5, burst=10)], "expires_at", "future"),
        (
            {"expires_at": "future", "reason": ""},
            [dict(rate=5, burst=10)],
            "reason",
            "needs a reason",
        ),
        (
            {"scope": ScopeKind.TIER, "tier": None},
            [dict(rate=5, burst=10)],
            "tier",
            "Choose the tier",
        ),
    ],
)
def test_policy_save__bad_input__field_error_and_nothing_stored(
    product, policy_fields, limits, field, words
):
    # Given a tenant policy with one problem
    tenant = TenantFactory(slug="acme")
    when = {
        "past": timezone.now() - timedelta(hours=1),
        "future": timezone.now() + timedelta(days=1),
    }
    fields = {
        "scope": ScopeKind.TENANT,
        "tenant": tenant,
        "reason": "launch",
        **policy_fields,
    }
    if "expires_at" in fields:
        fields["expires_at"] = when[fields["expires_at"]]
    rows = [Limit(dimension=Dimension.TENANT, **limit) for limit in limits]
    # When saving it / Then the error is on the right field and says what is wrong
    with pytest.raises(ValidationError) as raised:
        rules.policy_save(policy=Policy(**fields), limits=rows, actor=product)
    assert words in " ".join(raised.value.message_dict[field])
    assert not Policy.objects.filter(tenant=tenant).exists()
    assert not AuditEntry.objects.filter(object_type="policy").exists()


def test_policy_save__route_cost_above_burst__refused(product):
    route = RouteFactory(slug="export", cost=10)
    with pytest.raises(ValidationError) as raised:
        rules.policy_save(
            policy=_policy(route=route), limits=[Limit(rate=5, burst=5)], actor=product
        )
    assert "below the request cost 10" in raised.value.message_dict["limits"][0]


def test_policy_save__second_policy_for_same_scope_and_route__refused(product):
    tier = TierFactory(slug="pro")
    rules.policy_save(
        policy=_policy(tier=tier), limits=[Limit(rate=5, burst=10)], actor=product
    )
    with pytest.raises(ValidationError) as raised:
        rules.policy_save(
            policy=_policy(tier=tier), limits=[Limit(rate=6, burst=10)], actor=product
        )
    assert "already a policy for this scope and route" in str(raised.value)


def test_policy_save__override_next_to_permanent_tenant_policy__both_kept(product):
    tenant = TenantFactory(slug="acme")
    permanent = Policy(scope=ScopeKind.TENANT, tenant=tenant)
    rules.policy_save(policy=permanent, limits=[Limit(rate=5, burst=10)], actor=product)
    override = Policy(
        scope=ScopeKind.TENANT,
        tenant=tenant,
        reason="incident 42",
        expires_at=timezone.now() + timedelta(days=2),
    )
    rules.policy_save(
        policy=override, limits=[Limit(rate=50, burst=100)], actor=product
    )
    assert Policy.objects.filter(tenant=tenant).count() == 2


def test_policy_save__new_override_beside_an_expired_one__says_how_to_renew(product):
    # Given acme's override on all routes, which has since expired
    tenant = TenantFactory(slug="acme")
    old = Policy(
        scope=ScopeKind.TENANT,
        tenant=tenant,
        reason="launch",
        expires_at=timezone.now() + timedelta(days=2),
    )
    rules.policy_save(policy=old, limits=[Limit(rate=50, burst=100)], actor=product)
    Policy.objects.filter(pk=old.pk).update(expires_at=timezone.now() - timedelta(1))
    # When support gives acme a new override
    new = Policy(
        scope=ScopeKind.TENANT,
        tenant=tenant,
        reason="second launch",
        expires_at=timezone.now() + timedelta(days=2),
    )
    with pytest.raises(ValidationError) as refused:
        rules.policy_save(policy=new, limits=[Limit(rate=50, burst=100)], actor=product)
    # Then the error says the existing one expired, and what to do
    messages = refused.value.message_dict["__all__"]
    assert "already a temporary override" in messages[0]
    assert f"edit it (policy {old.pk}) with a new expiry" in messages[1]


def test_default_policy__service_delete__refused():
    default = Policy.objects.get(scope=ScopeKind.DEFAULT, route=None)
    with pytest.raises(ValidationError, match="cannot be deleted"):
        rules.rule_delete(obj=default, actor=Actor.system())
    assert Policy.objects.filter(pk=default.pk).exists()


@pytest.mark.parametrize(
    "sql",
    [
        "DELETE FROM limits_policy WHERE scope = 'default' AND route_id IS NULL",
        "UPDATE limits_policy SET scope = 'tier' WHERE scope = 'default' AND route_id IS NULL",
    ],
)
def test_default_policy__raw_sql_delete_or_rescope__refused_by_database(sql):
    with (
        pytest.raises((IntegrityError, InternalError), match="default policy"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql)
    assert Policy.objects.filter(scope=ScopeKind.DEFAULT, route=None).exists()


@pytest.mark.parametrize(
    "sql",
    ["UPDATE limits_auditentry SET actor = 'mallory'", "DELETE FROM limits_auditentry"],
)
def test_audit_log__update_or_delete__refused_by_database(product, sql):
    # Given an audit entry
    rules.rule_save(obj=Tier(slug="free", name="Free"), actor=product)
    # When anything tries to change or remove it with SQL
    with (
        pytest.raises(ProgrammingError, match="append-only"),
        transaction.atomic(),
        connection.cursor() as cursor,
    ):
        cursor.execute(sql)
    # Then Postgres refuses, and the entry is as it was
    assert AuditEntry.objects.get().actor == "pat-product"


def test_audit_record__write_fails_after_audit__both_rolled_back(product):
    # Given a service call whose transaction fails after the audit row was written
    with pytest.raises(RuntimeError), transaction.atomic():  # noqa: PT012
        rules.rule_save(obj=Tier(slug="free", name="Free"), actor=product)
        raise RuntimeError("later step failed")
    # Then neither the tier nor its audit entry exist
    assert not Tier.objects.exists()
    assert not AuditEntry.objects.exists()


class TestRoles:
    def test_support__tenant_override__allowed(self, support):
        policy = Policy(
            scope=ScopeKind.TENANT,
            tenant=TenantFactory(),
            reason="incident 7",
            expires_at=timezone.now() + timedelta(days=1),
        )
        rules.policy_save(
            policy=policy, limits=[Limit(rate=50, burst=100)], actor=support
        )
        assert AuditEntry.objects.get(object_type="policy").actor == "sam-support"

    def test_support__override_without_expiry__field_error(self, support):
        policy = Policy(
            scope=ScopeKind.TENANT, tenant=TenantFactory(), reason="incident 7"
        )
        with pytest.raises(ValidationError) as raised:
            rules.policy_save(
                policy=policy, limits=[Limit(rate=50, burst=100)], actor=support
            )
        assert "expiry" in raised.value.message_dict["expires_at"][0]

    @pytest.mark.parametrize("scope", [ScopeKind.TIER, ScopeKind.DEFAULT])
    def test_support__non_tenant_policy__permission_denied(self, support, scope):
        policy = Policy(
            scope=scope,
            tier=TierFactory() if scope == ScopeKind.TIER else None,
            route=RouteFactory(),
        )
        with pytest.raises(PermissionDenied):
            rules.policy_save(
                policy=policy, limits=[Limit(rate=5, burst=10)], actor=support
            )

    def test_support__permanent_tenant_policy__cannot_edit_or_delete(self, support):
        permanent = PolicyFactory(tenant=TenantFactory())
        permanent.expires_at = timezone.now() + timedelta(days=1)
        permanent.reason = "make it temporary"
        with pytest.raises(PermissionDenied):
            rules.policy_save(
                policy=permanent, limits=list(permanent.limits.all()), actor=support
            )
        with pytest.raises(PermissionDenied):
            rules.rule_delete(obj=Policy.objects.get(pk=permanent.pk), actor=support)

    def test_support__own_override__can_delete(self, support):
        override = PolicyFactory(override=True)
        rules.rule_delete(obj=override, actor=support)
        assert not Policy.objects.filter(pk=override.pk).exists()

    @pytest.mark.parametrize("role_user", ["support_user", "viewer_user"])
    def test_non_product__tier_tenant_route__permission_denied(
        self, request, role_user
    ):
        actor = Actor(user=request.getfixturevalue(role_user))
        with pytest.raises(PermissionDenied):
            rules.rule_save(obj=Tier(slug="x", name="X"), actor=actor)

    def test_viewer__any_policy__permission_denied(self, viewer_user):
        policy = Policy(
            scope=ScopeKind.TENANT,
            tenant=TenantFactory(),
            reason="r",
            expires_at=timezone.now() + timedelta(days=1),
        )
        with pytest.raises(PermissionDenied):
            rules.policy_save(
                policy=policy,
                limits=[Limit(rate=5, burst=10)],
                actor=Actor(user=viewer_user),
            )
