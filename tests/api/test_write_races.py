"""A PATCH racing a DELETE of the same object, in real threads on real Postgres: each
answers 2xx, 404 or 409, never 500, and a deleted object never comes back."""

import threading

import pytest
from django.db import connection

from limits.core.audit import Actor
from limits.gateways.tokens import token_create
from limits.models import ApiToken, Limit, Policy, Tier, WebhookEndpoint
from tests.api.conftest import ApiClient
from tests.conftest import default_policy
from tests.factories import PolicyFactory, TenantFactory, TierFactory, UserFactory

PAIRS = 10
B = "/api/v1"
#: Seconds a thread may take to reach the barrier, or to finish: generous, they only
#: stop a test that hangs (what is checked is the answers, not how fast they came).
PATIENT = 120


def _race(secret: str, patch: tuple[str, dict], delete: str) -> list[int | str]:
    """PATCH and DELETE started together from two threads; their statuses (or errors)."""
    barrier, outcomes = threading.Barrier(2), []

    def call(method: str, url: str, body: dict | None = None) -> None:
        client = ApiClient(raise_request_exception=False).bearer(secret)
        try:
            barrier.wait(timeout=PATIENT)
            response = getattr(client, method)(url, body, format="json")
            outcomes.append(response.status_code)
        except Exception as exc:  # reported by the assertion, with the thread's error
            outcomes.append(repr(exc))
        finally:
            connection.close()

    threads = [
        threading.Thread(target=call, args=("patch", *patch)),
        threading.Thread(target=call, args=("delete", delete)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=PATIENT)
    assert not any(thread.is_alive() for thread in threads), outcomes
    return outcomes


@pytest.fixture
def secret(transactional_db):
    default_policy()
    user = UserFactory(username="racer", role="product")
    return token_create(token=ApiToken(user=user, name="race"), actor=Actor.system())


def _assert_no_server_error(outcomes: list[int | str]) -> None:
    assert all(isinstance(o, int) and o < 500 for o in outcomes), outcomes
    patch, delete = outcomes if len(outcomes) == 2 else (None, None)
    assert {patch, delete} <= {200, 204, 404, 409}, outcomes


@pytest.mark.django_db(transaction=True)
def test_tier__patch_racing_delete__404_or_success_never_500(secret):
    for n in range(PAIRS):
        TierFactory(slug=f"race-{n}")
        url = f"{B}/tiers/race-{n}"
        _assert_no_server_error(_race(secret, (url, {"name": f"renamed {n}"}), url))
        # Then a deleted tier stays deleted (a late save must not insert it again)
        assert Tier.objects.filter(slug=f"race-{n}").count() <= 1


@pytest.mark.django_db(transaction=True)
def test_policy__patch_racing_delete__404_or_success_never_500(secret):
    tier = TierFactory(slug="pro")
    for n in range(PAIRS):
        policy = PolicyFactory(scope="tier", tier=tier)
        url = f"{B}/policies/{policy.pk}"
        _assert_no_server_error(_race(secret, (url, {"reason": f"r{n}"}), url))
        Policy.objects.filter(pk=policy.pk).delete()


@pytest.mark.django_db(transaction=True)
def test_limit__patch_racing_policy_delete__limit_not_inserted_again(secret):
    tier = TierFactory(slug="pro")
    for _ in range(PAIRS):
        policy = PolicyFactory(scope="tier", tier=tier)
        limit = policy.limits.get()
        outcomes = _race(
            secret,
            (f"{B}/limits/{limit.pk}", {"rate": 3}),
            f"{B}/policies/{policy.pk}",
        )
        _assert_no_server_error(outcomes)
        if outcomes.count(204):  # the policy went: its limit must not be back
            assert not Limit.objects.filter(pk=limit.pk).exists()
        Policy.objects.filter(pk=policy.pk).delete()


@pytest.mark.django_db(transaction=True)
def test_webhook_endpoint__patch_racing_delete__404_or_success_never_500(
    secret, settings
):
    settings.SLUICE_WEBHOOK_ALLOW_PRIVATE = True
    tenant = TenantFactory(slug="acme")
    for n in range(PAIRS):
        endpoint = WebhookEndpoint.objects.create(
            tenant=tenant, url=f"http://127.0.0.1:9/{n}", secret_encrypted="x"
        )
        url = f"{B}/webhook-endpoints/{endpoint.pk}"
        _assert_no_server_error(_race(secret, (url, {"description": "x"}), url))
        assert WebhookEndpoint.objects.filter(pk=endpoint.pk).count() <= 1
