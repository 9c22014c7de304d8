"""Bad input, tried for real: schemathesis drives every operation of the OpenAPI schema,
as an admin, a viewer and a gateway.

It must find no server error and no response that breaks the schema: every
status code, content type, header and body documented. A few examples per
operation here; ``make fuzz`` (``bench/fuzz.py``) runs every phase and check
with 200 per operation against gunicorn (``docs/benchmarks.md``).
"""

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from limits.core.audit import Actor
from limits.gateways.tokens import token_create
from limits.models import ApiToken, GatewayToken

CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
]


def _load_schema():
    """The schema, served by the WSGI app itself (generated without the database)."""
    from controlplane.wsgi import application

    return schemathesis.openapi.from_wsgi("/api/schema/?format=json", application)


schema = _load_schema()


@pytest.fixture(autouse=True)
def _keep_test_connection():
    """As Django's test client does: requests must not close the test's connection."""
    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    yield
    signals.request_started.connect(close_old_connections)
    signals.request_finished.connect(close_old_connections)


@pytest.fixture(params=["admin", "viewer", "gateway"])
def role_token(request, rules, redis_client, django_user_model):
    """The bearer token of an admin (superuser), a viewer or a gateway."""
    if request.param == "gateway":
        token = GatewayToken(name="fuzz")
    elif request.param == "admin":
        admin = django_user_model.objects.create_superuser("fuzz-admin", "", "x")
        token = ApiToken(user=admin, name="fuzz")
    else:
        token = ApiToken(user=request.getfixturevalue("viewer_user"), name="fuzz")
    return token_create(token=token, actor=Actor.system())


@pytest.mark.django_db
@schema.parametrize()
@settings(
    max_examples=4,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_api__generated_requests__no_server_error_and_schema_conformant(
    case, role_token
):
    case.call_and_validate(
        headers={"Authorization": f"Bearer {role_token}"}, checks=CHECKS
    )


@pytest.mark.django_db
def test_snapshot_diff__concurrency_limit_changed__schema_conformant(
    rules, redis_client, django_user_model, no_notice_period
):
    # Given a published policy with a concurrency limit, then its cap lowered in the
    # working copy (a concurrency limit has no period: null in the diff)
    from limits.choices import Dimension, LimitKind
    from limits.models import Limit
    from limits.publishing.services import snapshot_publish

    Limit.objects.create(
        policy=rules["pro_search"],
        kind=LimitKind.CONCURRENT,
        dimension=Dimension.TENANT,
        rate=None,
        period=None,
        burst=None,
        max_inflight=3,
        timeout=60,
    )
    snapshot_publish(actor=Actor.system(), message="v1")
    Limit.objects.filter(kind=LimitKind.CONCURRENT).update(max_inflight=2)
    admin = django_user_model.objects.create_superuser("diff-admin", "", "x")
    secret = token_create(token=ApiToken(user=admin, name="d"), actor=Actor.system())
    # When the diff of the active version and the working copy is read
    case = schema["/api/v1/snapshots/diff"]["GET"].Case(
        query={"old": "active", "new": "working"}
    )
    response = case.call(headers={"Authorization": f"Bearer {secret}"})
    # Then it holds the change, and every field is what the schema says
    assert response.status_code == 200, response.text
    periods = [
        limit["period"]
        for change in response.json()["changes"]
        for limit in change["limits"]
    ]
    assert None in periods
    case.validate_response(response, checks=CHECKS)
