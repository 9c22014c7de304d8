"""Who may call what, for every operation of the API: anonymous, gateway, viewer, support, product.

The operations come from the OpenAPI schema, so a new endpoint is in the matrix
the day it is added.
"""

from datetime import timedelta

import pytest
import yaml
from django.test import Client
from django.utils import timezone

from limits.ascode.services import rules_export
from limits.changes.services import Proposal, change_request_open
from limits.core.audit import Actor
from limits.gateways.tokens import token_create
from limits.models import ApiToken, AuditEntry, GatewayToken
from limits.publishing.services import snapshot_publish
from tests.factories import PolicyFactory

pytestmark = pytest.mark.django_db

PRINCIPALS = ["anonymous", "gateway", "viewer", "support", "product"]
GATEWAY_READS = {("get", "/api/v1/snapshot"), ("get", "/api/v1/snapshots/{version}")}
SUPPORT_WRITES = (
    "/api/v1/policies",
    "/api/v1/limits",
    "/api/v1/webhook-endpoints",
    "/api/v1/deliveries",
)
OWN_TOKENS = "/api/v1/tokens"
# Support proposes and publishes its own override requests (the services refuse the rest)
SUPPORT_PROPOSES = (
    "/api/v1/change-requests",
    "/api/v1/rules/apply",
    "/api/v1/overrides",
)
# The request in the matrix is the system's: support may not act on it, product may
NOT_SUPPORTS = {
    "/api/v1/change-requests/{id}/approve",
    "/api/v1/change-requests/{id}/publish",
    "/api/v1/change-requests/{id}/rebase",
    "/api/v1/change-requests/{id}/withdraw",
    "/api/v1/change-requests/from-working-copy",
}
READS_BY_POST = {("post", "/api/v1/rules/diff")}  # a file in the body: still a read


def _operations():
    client = Client()
    schema = yaml.safe_load(client.get("/api/schema/").content)
    return sorted(
        (method, path)
        for path, item in schema["paths"].items()
        for method in item
        if path.startswith("/api/v1/")
    )


def expected(principal: str, method: str, path: str) -> str:
    """'allowed' (neither 401 nor 403), 'unauthenticated' (401) or 'forbidden' (403)."""
    if path == "/api/v1/snapshot":
        return "allowed" if principal == "gateway" else "unauthenticated"
    if principal == "anonymous":
        return "unauthenticated"
    if (method, path) in GATEWAY_READS:
        return "allowed"
    if principal == "gateway":
        return "forbidden"
    if path.startswith(OWN_TOKENS) or method == "get" or principal == "product":
        return "allowed"
    if (method, path) in READS_BY_POST:
        return "allowed"
    if principal == "support" and path in NOT_SUPPORTS:
        return "forbidden"
    if principal == "support" and path.startswith(SUPPORT_WRITES + SUPPORT_PROPOSES):
        return "allowed"
    return "forbidden"


@pytest.fixture
def world(
    rules,
    redis_client,
    django_capture_on_commit_callbacks,
    product_user,
    support_user,
    viewer_user,
):
    """One object of each kind for the path parameters, and a credential per principal."""
    override = PolicyFactory(override=True, tenant=rules["acme"], route=rules["search"])
    with django_capture_on_commit_callbacks(execute=True):
        snapshot_publish(actor=Actor.system(), message="v1")
    exported = rules_export()
    request = change_request_open(
        actor=Actor.system(), proposals=[Proposal("policy", "", _override_doc())]
    )
    gateway = GatewayToken(name="gw")
    secrets = {"gateway": token_create(token=gateway, actor=Actor.system())}
    spare = {}
    for name, user in [
        ("viewer", viewer_user),
        ("support", support_user),
        ("product", product_user),
    ]:
        secrets[name] = token_create(
            token=ApiToken(user=user, name="matrix"), actor=Actor.system()
        )
        spare[name] = ApiToken(user=user, name="spare")  # the one /tokens/{id} revokes
        token_create(token=spare[name], actor=Actor.system())
    return {
        "secrets": secrets,
        "params": {
            "slug": "acme",
            "id": str(override.pk),
            "version": "1",
        },
        "ids": {
            "/api/v1/tiers/{slug}": "pro",
            "/api/v1/routes/{slug}": "search",
            "/api/v1/tenants/{slug}": "acme",
            "/api/v1/policies/{id}": override.pk,
            "/api/v1/limits/{id}": override.limits.get().pk,
            "/api/v1/audit/{id}": AuditEntry.objects.first().pk,
            "/api/v1/gateway-tokens/{id}": gateway.pk,
        },
        "spare": {name: token.pk for name, token in spare.items()},
        "override": override,
        "change_request": request.pk,
        "exported": exported,
    }


def _override_doc(route: str = "orders.read") -> dict:
    later = (timezone.now() + timedelta(days=1)).replace(microsecond=0)
    return {
        "scope": "tenant:acme",
        "route": route,
        "expires_at": later.isoformat(),
        "reason": "matrix",
        "limits": [{"dimension": "tenant", "rate": 9, "period": "second", "burst": 20}],
    }


def _url(world, path: str, principal: str) -> str:
    if path.startswith("/api/v1/change-requests/{id}"):
        return path.replace("{id}", str(world["change_request"]))
    if path == "/api/v1/tokens/{id}":
        return f"/api/v1/tokens/{world['spare'].get(principal, 0)}"
    if path in world["ids"]:
        return path.split("{")[0] + str(world["ids"][path])
    for name, value in world["params"].items():
        path = path.replace("{" + name + "}", value)
    return path


def _body(world, method: str, path: str) -> dict:
    """A valid body where one is needed, so a refusal can only come from the role."""
    later = (timezone.now() + timedelta(days=1)).isoformat()
    override = {
        "scope": "tenant",
        "tenant": "acme",
        "route": "search",
        "reason": "matrix",
        "expires_at": later,
        "limits": [{"dimension": "tenant", "rate": 9, "burst": 20}],
    }
    bodies = {
        "/api/v1/policies": {**override, "route": "orders.read"},
        "/api/v1/policies/{id}": override,
        "/api/v1/limits": {
            "policy": world["override"].pk,
            "dimension": "user",
            "rate": 5,
            "burst": 10,
        },
        "/api/v1/limits/{id}": {
            "policy": world["override"].pk,
            "dimension": "tenant",
            "rate": 5,
            "burst": 10,
        },
        "/api/v1/snapshots/publish": {"message": "m"},
        "/api/v1/snapshots/{version}/rollback": {"message": "m"},
        "/api/v1/change-requests": {
            "edits": [{"object": "policy", "value": _override_doc("search")}]
        },
        "/api/v1/rules/diff": {"document": world["exported"]},
        "/api/v1/rules/apply": {"document": _with_override(world["exported"])},
    }
    return bodies.get(path, {"name": "matrix-token"} if "tokens" in path else {})


def _with_override(exported: str) -> str:
    """The exported rules with one more override: what support may apply."""
    data = yaml.safe_load(exported)
    data["policies"].append(_override_doc("search"))
    return yaml.safe_dump(data)


@pytest.mark.parametrize("principal", PRINCIPALS)
def test_every_operation__each_principal__allowed_only_as_its_role_says(
    world, principal
):
    # Given a credential of one kind / When it calls every operation of the API
    headers = {"HTTP_SLUICE_GATEWAY_ID": "gw-matrix"}
    if principal != "anonymous":
        headers["HTTP_AUTHORIZATION"] = f"Bearer {world['secrets'][principal]}"
    client = Client()
    wrong = []
    for method, path in _operations():
        call = getattr(client, method)
        response = (
            call(
                _url(world, path, principal),
                data=_body(world, method, path),
                content_type="application/json",
                **headers,
            )
            if method != "get"
            else call(_url(world, path, principal), **headers)
        )
        got = {401: "unauthenticated", 403: "forbidden"}.get(
            response.status_code, "allowed"
        )
        # Then each answer is what the role allows (and never a server error)
        if got != expected(principal, method, path) or response.status_code >= 500:
            wrong.append(
                f"{method.upper()} {path}: {response.status_code} {response.content[:200]!r}"
            )
    assert wrong == []
