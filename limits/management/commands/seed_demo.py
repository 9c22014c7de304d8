"""Load demo rules and users so a new installation has something to look at. Idempotent."""

from pathlib import Path

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.management.base import BaseCommand
from django.db import transaction

from limits.choices import Dimension, FailureMode, LimitKind, Period, Role, ScopeKind
from limits.core.audit import Actor
from limits.gateways.tokens import token_create
from limits.models import (
    GatewayToken,
    Limit,
    Policy,
    Route,
    Snapshot,
    Tenant,
    Tier,
    hash_secret,
)
from limits.publishing.services import snapshot_publish
from limits.rules import services as rules

TIERS = [("free", "Free", 0), ("pro", "Pro", 1), ("enterprise", "Enterprise", 2)]
ROUTES = [
    ("search", ["GET"], "/v1/search", 1, FailureMode.OPEN, "Full-text search"),
    ("orders.read", ["GET"], "/v1/orders/{id}", 1, FailureMode.OPEN, "Read one order"),
    ("orders.list", ["GET"], "/v1/orders", 2, FailureMode.OPEN, "List orders"),
    ("orders.create", ["POST"], "/v1/orders", 5, FailureMode.CLOSED, "Place an order"),
    (
        "reports.export",
        ["POST"],
        "/v1/reports/{id}/export",
        10,
        FailureMode.LOCAL,
        "Export a report",
    ),
]
TENANTS = [
    ("acme", "Acme Corp", "pro", ["ops@acme.example"]),
    ("globex", "Globex", "enterprise", ["platform@globex.example"]),
    ("initech", "Initech", "free", ["dev@initech.example"]),
    ("umbrella", "Umbrella", "free", []),
    ("hooli", "Hooli", "pro", ["api@hooli.example"]),
]
# (scope, subject, route or None, [(dimension, rate, period, burst, cost)])
POLICIES = [
    (ScopeKind.DEFAULT, None, None, [(Dimension.IP, 10, Period.SECOND, 20, None)]),
    (ScopeKind.TIER, "free", None, [(Dimension.TENANT, 10, Period.SECOND, 20, None)]),
    (
        ScopeKind.TIER,
        "free",
        "search",
        [
            (Dimension.TENANT, 5, Period.SECOND, 10, None),
            (Dimension.USER, 2, Period.SECOND, 5, None),
        ],
    ),
    (ScopeKind.TIER, "pro", None, [(Dimension.TENANT, 100, Period.SECOND, 200, None)]),
    (
        ScopeKind.TIER,
        "pro",
        "search",
        [(Dimension.TENANT, 50, Period.SECOND, 100, None)],
    ),
    (
        ScopeKind.TIER,
        "enterprise",
        None,
        [
            (Dimension.TENANT, 1000, Period.SECOND, 2000, None),
            (Dimension.API_KEY, 200, Period.SECOND, 400, None),
        ],
    ),
    (
        ScopeKind.TIER,
        "free",
        "orders.create",
        [
            (Dimension.TENANT, 2, Period.SECOND, 10, None),
            (Dimension.TENANT, 1000, Period.DAY, 1000, None),
        ],
    ),
    (
        ScopeKind.TENANT,
        "globex",
        "search",
        [(Dimension.TENANT, 2000, Period.SECOND, 4000, None)],
    ),
    # Exports are expensive: at most two in flight per tenant (a limit of kind concurrent).
    (
        ScopeKind.DEFAULT,
        None,
        "reports.export",
        [
            (Dimension.TENANT, 20, Period.MINUTE, 20, None),
            (LimitKind.CONCURRENT, Dimension.TENANT, 2, 120),
        ],
    ),
]
USERS = [
    ("admin", None),
    ("product", Role.PRODUCT),
    ("support", Role.SUPPORT),
    ("viewer", Role.VIEWER),
]


class Command(BaseCommand):
    help = "Create demo tiers, tenants, routes, policies and users (admin/admin, product/product...)."

    def add_arguments(self, parser):
        parser.add_argument(
            "--gateway-token-file",
            help="Write a gateway token for the demo gateway here (kept if still valid).",
        )

    @transaction.atomic
    def handle(self, *args, gateway_token_file: str | None = None, **options):
        actor = Actor.system("seed_demo")
        tiers = {slug: self._tier(slug, name, pos, actor) for slug, name, pos in TIERS}
        routes = {row[0]: self._route(*row, actor=actor) for row in ROUTES}
        tenants = {
            slug: self._tenant(slug, name, tiers[tier], emails, actor)
            for slug, name, tier, emails in TENANTS
        }
        for scope, subject, route, limits in POLICIES:
            self._policy(scope, subject, route, limits, tiers, tenants, routes, actor)
        for username, role in USERS:
            self._user(username, role)
        if not Snapshot.objects.exists():
            snapshot_publish(
                actor=actor, message="Demo rules: tiers free, pro and enterprise."
            )
        if gateway_token_file:
            self._gateway_token(Path(gateway_token_file), actor)
        self.stdout.write(
            "Demo data ready. Log in as admin/admin (also product, support, viewer: password = name)."
        )

    def _gateway_token(self, path: Path, actor):
        """A token for the demo gateway, in a file only this user can read."""
        if path.exists():
            secret = path.read_text().strip()
            if GatewayToken.objects.filter(
                key_hash=hash_secret(secret), revoked_at=None
            ).exists():
                return
        secret = token_create(token=GatewayToken(name="demo-gateway"), actor=actor)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(secret + "\n")
        path.chmod(0o600)

    def _tier(self, slug, name, position, actor):
        tier = Tier.objects.filter(slug=slug).first()
        return tier or rules.rule_save(
            obj=Tier(slug=slug, name=name, position=position), actor=actor
        )

    def _route(self, slug, methods, path, cost, mode, description, *, actor):
        route = Route.objects.filter(slug=slug).first()
        new = Route(
            slug=slug,
            methods=methods,
            path_pattern=path,
            cost=cost,
            failure_mode=mode,
            description=description,
        )
        return route or rules.rule_save(obj=new, actor=actor)

    def _tenant(self, slug, name, tier, emails, actor):
        tenant = Tenant.objects.filter(slug=slug).first()
        new = Tenant(slug=slug, name=name, tier=tier, contact_emails=emails)
        return tenant or rules.rule_save(obj=new, actor=actor)

    def _policy(self, scope, subject, route, limits, tiers, tenants, routes, actor):
        policy = Policy.objects.filter(
            scope=scope,
            tier=tiers.get(subject) if scope == ScopeKind.TIER else None,
            tenant=tenants.get(subject) if scope == ScopeKind.TENANT else None,
            route=routes.get(route),
            expires_at=None,
        ).first()
        if policy is not None and (policy.limits.exists() or not policy.is_default):
            return
        policy = policy or Policy(
            scope=scope,
            tier=tiers.get(subject) if scope == ScopeKind.TIER else None,
            tenant=tenants.get(subject) if scope == ScopeKind.TENANT else None,
            route=routes.get(route),
        )
        rows = [self._limit(spec) for spec in limits]
        rules.policy_save(policy=policy, limits=rows, actor=actor)

    def _limit(self, spec) -> Limit:
        if spec[0] == LimitKind.CONCURRENT:
            _, dimension, most, timeout = spec
            return Limit(
                kind=LimitKind.CONCURRENT,
                dimension=dimension,
                rate=None,
                period=None,
                burst=None,
                max_inflight=most,
                timeout=timeout,
            )
        dimension, rate, period, burst, cost = spec
        return Limit(
            dimension=dimension, rate=rate, period=period, burst=burst, cost=cost
        )

    def _user(self, username, role):
        users = get_user_model()
        if users.objects.filter(username=username).exists():
            return
        if role is None:
            users.objects.create_superuser(
                username, f"{username}@sluice.localhost", username
            )
            return
        user = users.objects.create_user(
            username, f"{username}@sluice.localhost", username, is_staff=True
        )
        user.groups.add(Group.objects.get(name=role.value))
