"""Bad input, tried for real: schemathesis drives every operation of the OpenAPI schema.

It must find no server error and no response that breaks the schema: every
status code documented, every body of the documented shape.
"""

import pytest
import schemathesis
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    response_schema_conformance,
    status_code_conformance,
)

from limits.core.audit import Actor
from limits.gateways.tokens import token_create
from limits.models import ApiToken

CHECKS = [not_a_server_error, status_code_conformance, response_schema_conformance]


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


@pytest.fixture
def product_token(product_user, rules, redis_client):
    return token_create(
        token=ApiToken(user=product_user, name="fuzz"), actor=Actor.system()
    )


@pytest.mark.django_db
@schema.parametrize()
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    derandomize=True,
)
def test_api__generated_requests__no_server_error_and_schema_conformant(
    case, product_token
):
    case.call_and_validate(
        headers={"Authorization": f"Bearer {product_token}"}, checks=CHECKS
    )
