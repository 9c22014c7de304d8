"""Two transactions saving routes that claim one method and path at the same moment:
the database refuses the second (``limits.models.RouteClaim``), with a message
naming the route that holds it, and the working copy stays usable.

Real concurrent transactions on real Postgres: each writer runs in a thread on
its own connection. The first is held open until the second is waiting on it,
so the second's checks cannot have seen the first's route: only the database
can refuse it.
"""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections, transaction

from limits.core.audit import Actor
from limits.gateways.tokens import token_create
from limits.models import ApiToken, Route, RouteClaim
from limits.rules.claims import RouteClaimed
from limits.rules.services import rule_save
from tests.api.conftest import ApiClient
from tests.celery_fixtures import wait_until
from tests.conftest import default_policy
from tests.factories import UserFactory

pytestmark = pytest.mark.usefixtures("no_notice_period", "no_approval_rule")

#: Seconds a thread may take: generous, they only stop a test that hangs.
PATIENT = 120
B = "/api/v1"


def _waiting_on_a_lock() -> int:
    """Sessions of this database waiting on another transaction's lock."""
    with connections["default"].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0]


def _in_thread(work, results: list) -> threading.Thread:
    def run() -> None:
        try:
            results.append(work())
        except Exception as exc:  # what the second writer met, checked below
            results.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


@pytest.mark.django_db(transaction=True)
def test_rule_save__route_saved_by_an_open_transaction__second_refused_by_the_database():
    # Given a first transaction that saved GET /v1/things/{id} and has not committed
    saved, release, first = threading.Event(), threading.Event(), []

    def hold_open():
        with transaction.atomic():
            route = Route(
                slug="things", methods=["GET"], path_pattern="/v1/things/{id}"
            )
            rule_save(obj=route, actor=Actor.system())
            saved.set()
            release.wait(timeout=PATIENT)
        return route.slug

    holder = _in_thread(hold_open, first)
    assert saved.wait(timeout=PATIENT)
    # When a second saves GET /v1/things/{thing} (one shape to match) meanwhile
    second = []
    contender = _in_thread(
        lambda: rule_save(
            obj=Route(
                slug="things-2",
                methods=["GET", "POST"],
                path_pattern="/v1/things/{thing}",
            ),
            actor=Actor.system(),
        ),
        second,
    )
    wait_until(
        lambda: _waiting_on_a_lock() >= 1,
        timeout=PATIENT,
        every=0.05,
        why="the second writer waiting on the first",
    )
    release.set()
    holder.join(timeout=PATIENT)
    contender.join(timeout=PATIENT)
    # Then the first is kept; the second is refused, naming the route that holds it
    assert first == ["things"]
    (refused,) = second
    assert isinstance(refused, RouteClaimed), refused
    message = refused.message_dict["path_pattern"][0]
    assert "GET /v1/things/{}" in message
    assert "'things'" in message
    assert list(Route.objects.values_list("slug", flat=True)) == ["things"]
    assert RouteClaim.objects.count() == 1


@pytest.fixture
def secret(transactional_db):
    default_policy()
    user = UserFactory(username="racer", role="product")
    return token_create(token=ApiToken(user=user, name="race"), actor=Actor.system())


def test_api_route_create__two_at_once__one_201_one_409_and_the_copy_stays_usable(
    secret,
):
    # Given two clients creating routes on GET /v1/race-N at the same moment, 6 times
    answers = []
    for n in range(6):
        barrier, outcomes = threading.Barrier(2), []

        def post(slug: str, n: int = n, barrier=barrier):
            client = ApiClient(raise_request_exception=False).bearer(secret)
            barrier.wait(timeout=PATIENT)
            body = {"slug": slug, "methods": ["GET"], "path_pattern": f"/v1/race-{n}"}
            return client.post(f"{B}/routes", body, format="json")

        threads = [
            _in_thread(lambda s=s: post(s), outcomes) for s in (f"a{n}", f"b{n}")
        ]
        for thread in threads:
            thread.join(timeout=PATIENT)
        answers.append(outcomes)
    # Then each time one is created, never both: the other gets a 409 when it lost
    # the race in the database (its checks passed before the first was stored), or
    # a 400 when its checks already saw the first; each names the route holding it
    for outcomes in answers:
        statuses = sorted(
            o.status_code if hasattr(o, "status_code") else repr(o) for o in outcomes
        )
        assert statuses in ([201, 400], [201, 409]), outcomes
        (refused,) = [o for o in outcomes if o.status_code != 201]
        said = str(refused.json())
        assert "claimed by" in said, said
    assert Route.objects.count() == 6
    # and unrelated writes and the working copy's diff still work
    api = ApiClient().bearer(secret)
    other = {"slug": "other", "methods": ["POST"], "path_pattern": "/v1/other"}
    assert api.post(f"{B}/routes", other, format="json").status_code == 201
    diff = api.get(f"{B}/snapshots/diff?old=active&new=working")
    assert diff.status_code == 200, diff.content
