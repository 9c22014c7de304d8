"""Gateway tokens: answered from Redis once known, refused at once when revoked."""

import pytest

from limits.core.audit import Actor
from limits.gateways.tokens import (
    gateway_token_authenticate,
    token_create,
    token_revoke,
)
from limits.models import GatewayToken

pytestmark = pytest.mark.django_db


def test_gateway_token__known__no_database_query_after_first_use(
    redis_client, django_assert_num_queries
):
    # Given a gateway token that was used once
    token = GatewayToken(name="gw-1")
    secret = token_create(token=token, actor=Actor.system())
    assert gateway_token_authenticate(secret) == token.prefix
    # When it is used again / Then Redis answers
    with django_assert_num_queries(0):
        assert gateway_token_authenticate(secret) == token.prefix
    token.refresh_from_db()
    assert token.last_used_at is not None


def test_gateway_token__revoked__refused_at_once(
    redis_client, django_capture_on_commit_callbacks
):
    token = GatewayToken(name="gw-1")
    secret = token_create(token=token, actor=Actor.system())
    gateway_token_authenticate(secret)
    with django_capture_on_commit_callbacks(execute=True):
        token_revoke(token=token, actor=Actor.system())
    assert gateway_token_authenticate(secret) is None


def test_gateway_token__unknown_secret__refused(redis_client):
    assert gateway_token_authenticate("slg_not-a-token") is None
