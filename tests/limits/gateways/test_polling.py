"""The poll window: 304s from memory, reports written once per window, never an older bundle."""

import pytest

from limits.core.audit import Actor
from limits.gateways.counters import SNAPSHOT_POLLS, counter_field
from limits.gateways.keys import BUNDLE_KEY, COUNTERS_KEY
from limits.gateways.tokens import token_create
from limits.models import GatewayToken
from limits.publishing.services import snapshot_publish

pytestmark = pytest.mark.django_db

URL = "/api/v1/snapshot"
#: A poll window no test outlasts (the default is a second)
LONG_WINDOW_MS = 600_000


@pytest.fixture
def published(rules, redis_client, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        return snapshot_publish(actor=Actor.system(), message="first")


@pytest.fixture
def secret(db):
    return token_create(token=GatewayToken(name="gw"), actor=Actor.system())


def _poll(client, secret, gateway="gw-1", **headers):
    return client.get(
        URL,
        HTTP_AUTHORIZATION=f"Bearer {secret}",
        HTTP_SLUICE_GATEWAY_ID=gateway,
        **headers,
    )


def _redis_calls(redis_client) -> int:
    stats = redis_client.info("commandstats")
    return sum(value["calls"] for value in stats.values())


def test_poll__current_etag_within_window__304_without_redis(
    client, published, secret, redis_client, settings
):
    # Given a gateway whose token and ETag this process has just heard about (a window
    # longer than the test: a loaded machine may take more than the default second)
    settings.SLUICE_POLL_WINDOW_MS = LONG_WINDOW_MS
    etag = _poll(client, secret)["ETag"]
    before = _redis_calls(redis_client)
    # When it polls again with that ETag, as 3 gateways
    statuses = [
        _poll(client, secret, f"gw-{n}", HTTP_IF_NONE_MATCH=etag).status_code
        for n in range(3)
    ]
    # Then the 304s cost no Redis command (INFO itself counts one)
    assert statuses == [304, 304, 304]
    assert _redis_calls(redis_client) - before == 1


def test_poll__window_flushed__reports_and_count_written_in_one_pipeline(
    client, published, secret, redis_client, settings
):
    # Given polls answered from memory (within a window no test outlasts)
    settings.SLUICE_POLL_WINDOW_MS = LONG_WINDOW_MS
    etag = _poll(client, secret)["ETag"]
    for n in range(3):
        _poll(client, secret, f"gw-{n}", HTTP_IF_NONE_MATCH=etag)
    # When the window has passed and the next poll comes
    settings.SLUICE_POLL_WINDOW_MS = 0
    _poll(client, secret, "gw-9", HTTP_IF_NONE_MATCH=etag)
    # Then every gateway's report and every poll reached Redis
    gateways = {g.decode() for g in redis_client.hkeys("sluice:fleet:gateways")}
    assert gateways == {"gw-0", "gw-1", "gw-2", "gw-9"}
    assert _polls(redis_client) == {"200": 1, "304": 4}


def test_poll__gateway_holds_a_newer_etag_than_the_window__never_downgraded(
    client, published, secret, redis_client
):
    # Given this process's window holds the ETag of version 1
    old = _poll(client, secret)["ETag"]
    # When another process stores a newer bundle and a gateway already holds it
    redis_client.hset(BUNDLE_KEY, "etag", '"newer"')
    response = _poll(client, secret, HTTP_IF_NONE_MATCH='"newer"')
    # Then Redis is asked: 304 for the newer ETag, not the older bundle
    assert response.status_code == 304
    assert response["ETag"] == '"newer"' != old


def test_poll__window_zero__every_poll_asks_redis(
    client, published, secret, redis_client, settings
):
    settings.SLUICE_POLL_WINDOW_MS = 0
    etag = _poll(client, secret)["ETag"]
    for _ in range(3):
        _poll(client, secret, HTTP_IF_NONE_MATCH=etag)
    assert _polls(redis_client) == {"200": 1, "304": 3}


def test_poll__no_etag_within_window__bundle_from_memory_without_redis(
    client, published, secret, redis_client, settings
):
    # Given a process that has served the bundle once (within a window longer than the
    # test, as above)
    settings.SLUICE_POLL_WINDOW_MS = LONG_WINDOW_MS
    first = _poll(client, secret)
    before = _redis_calls(redis_client)
    # When another gateway starts (no ETag) within the window
    response = _poll(client, secret, "gw-new")
    # Then it gets the same bundle, and Redis was not asked (INFO counts one)
    assert response.status_code == 200
    assert response.content == first.content
    assert _redis_calls(redis_client) - before == 1


def _polls(redis_client) -> dict[str, int]:
    """The shared poll counter of the metrics endpoint, by result."""
    counts = {}
    for result in ("200", "304", "401"):
        value = redis_client.hget(
            COUNTERS_KEY, counter_field(SNAPSHOT_POLLS, labels={"result": result})
        )
        if value is not None:
            counts[result] = int(value)
    return counts


def test_poll__weak_etag_in_a_list_through_redis__counted_as_a_304(
    client, published, secret, redis_client, settings
):
    # Given every poll asks Redis
    settings.SLUICE_POLL_WINDOW_MS = 0
    etag = _poll(client, secret)["ETag"]
    # When a gateway sends the ETag weak, in a list
    response = _poll(client, secret, HTTP_IF_NONE_MATCH=f'"older", W/{etag}')
    # Then the answer and the shared counters agree: a 304
    assert response.status_code == 304
    assert _polls(redis_client) == {"200": 1, "304": 1}
