"""Test session setup: real Postgres (pytest-django), a private real Redis per worker.

Tests never use SQLite or a fake Redis. Outbound connections are limited to
loopback addresses, so no test can reach the internet or another machine.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import tempfile
from pathlib import Path

import pytest
import redis

import sluice.aio
from controlplane import celery_app
from controlplane.preflight import ServiceUnavailable, check_postgres
from tests.celery_fixtures import (  # noqa: F401  (fixtures for every test module)
    celery_beat,
    celery_env,
    celery_worker,
)
from tests.servers import RedisServer
from tests.signing import keys_file


def pytest_addoption(parser):
    parser.addoption(
        "--no-pipelining",
        action="store_true",
        help="asyncio limiters (and decision services) send one Redis call per "
        "decision: the suite runs once this way too (make test)",
    )


def pytest_configure(config):
    if config.getoption("--no-pipelining"):
        sluice.aio.PIPELINING_DEFAULT = False
    # Every gateway the suite starts (the demo gateway, sluice-decide) inherits the
    # key set it must trust: the tests' signing key, which the control plane under
    # test and tests/client/protocol_server.py sign with.
    if "SLUICE_PUBLIC_KEYS" not in os.environ:
        os.environ["SLUICE_PUBLIC_KEYS"] = str(
            keys_file(Path(tempfile.mkdtemp(prefix="sluice-keys-")))
        )


def pytest_sessionstart(session):
    try:
        check_postgres(create_database=False)
    except ServiceUnavailable as exc:
        if "does not exist" not in str(
            exc
        ):  # pytest-django creates its own test database
            pytest.exit(str(exc), returncode=3)


_real_connect = socket.socket.connect


def _loopback_only(sock, address):
    host = address[0] if isinstance(address, tuple) else None
    if host is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        try:
            if not ipaddress.ip_address(host).is_loopback:
                raise OSError(
                    f"tests may only connect to loopback addresses, not {host}"
                )
        except ValueError:
            if host != "localhost":
                raise OSError(
                    f"tests may only connect to loopback addresses, not {host}"
                ) from None
    return _real_connect(sock, address)


@pytest.fixture(autouse=True, scope="session")
def _restrict_network():
    socket.socket.connect = _loopback_only
    yield
    socket.socket.connect = _real_connect


@pytest.fixture(autouse=True, scope="session")
def _flush_past_the_history_triggers():
    """Let the flush that ends a transactional test empty the audit log and snapshots.

    Migration ``audit_chain`` makes the database refuse TRUNCATE on them; the suite's
    superuser holds every trigger off for the flush's own transaction only
    (``session_replication_role``), as an operator with that power could.
    """
    from django.db.backends.postgresql.operations import DatabaseOperations

    flush = DatabaseOperations.execute_sql_flush

    def execute_sql_flush(self, sql_list):
        return flush(self, ["SET LOCAL session_replication_role = replica", *sql_list])

    DatabaseOperations.execute_sql_flush = execute_sql_flush
    yield
    DatabaseOperations.execute_sql_flush = flush


@pytest.fixture(scope="session")
def redis_server():
    """A redis-server of this test worker's own."""
    server = RedisServer().start()
    yield server
    server.cleanup()


@pytest.fixture(autouse=True, scope="session")
def _celery_on_test_redis(redis_server):
    """Tasks sent by tests go to this worker's Redis, never to the machine's."""
    celery_app.conf.broker_url = f"redis://127.0.0.1:{redis_server.port}/1"


@pytest.fixture(autouse=True)
def _point_at_test_redis(redis_server, settings):
    """Django settings aimed at this worker's Redis for every test."""
    settings.REDIS_URL = redis_server.url
    settings.CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": redis_server.url,
            "KEY_PREFIX": "sluice-test",
        }
    }


@pytest.fixture(autouse=True)
def _fresh_poll_window():
    """Each test starts with a process that has heard nothing from Redis about polls."""
    from limits.gateways.window import poll_window_reset

    poll_window_reset(drop_reports=True)


#: Seconds the control plane's Redis calls may take in tests that are not about its
#: timeouts: generous, so that a loaded machine slows them down instead of turning
#: "Redis answered slowly" into the "Redis does not answer" path.
PATIENT_REDIS_TIMEOUT = 60.0


@pytest.fixture
def patient_poll_redis(settings):
    """The gateways' poll path waits for Redis as long as it takes.

    The product gives it 250 ms (``SLUICE_POLL_REDIS_TIMEOUT_MS``), past which a poll
    is answered from memory or Postgres and its report stays buffered: right for a
    paused Redis (``tests/faults``), a wrong verdict for a test of what a poll records
    that merely ran on a busy machine. Not for tests of the timeout itself.
    """
    settings.SLUICE_POLL_REDIS_TIMEOUT_MS = int(PATIENT_REDIS_TIMEOUT * 1000)


@pytest.fixture
def redis_client(redis_server):
    """A client on the worker's Redis, emptied before and after the test."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    yield client
    client.flushdb()
    client.close()


@pytest.fixture(autouse=True)
def _baseline_rows(request):
    """Rows that migrations create and a transactional test's flush removes: put them back."""
    uses_db = request.node.get_closest_marker("django_db") or {
        "db",
        "transactional_db",
    } & set(request.fixturenames)
    if not uses_db:
        return
    request.getfixturevalue("_django_db_helper")
    from limits.rules.baseline import baseline_ensure

    baseline_ensure()


@pytest.fixture
def no_notice_period(settings):
    """For tests of publishing mechanics: lowerings may take effect at once.

    The notice period itself is tested in ``tests/limits/publishing/test_notice.py``.
    """
    settings.SLUICE_NOTICE_PERIOD_DAYS = 0


@pytest.fixture
def no_approval_rule(settings):
    """For tests of publishing mechanics: a person may publish a lowering directly.

    The approval rule itself is tested in ``tests/limits/changes/``.
    """
    settings.SLUICE_APPROVAL_LOWERING = False
    settings.SLUICE_APPROVAL_TENANTS = 10**9


@pytest.fixture
def product_user(db):
    from tests.factories import UserFactory

    return UserFactory(username="pat-product", role="product")


@pytest.fixture
def support_user(db):
    from tests.factories import UserFactory

    return UserFactory(username="sam-support", role="support")


@pytest.fixture
def viewer_user(db):
    from tests.factories import UserFactory

    return UserFactory(username="val-viewer", role="viewer")


def default_policy():
    """The default policy for all routes (migrations create it; a flush may not)."""
    from limits.choices import Dimension, ScopeKind
    from limits.models import Limit, Policy

    policy, created = Policy.objects.get_or_create(
        scope=ScopeKind.DEFAULT, route=None, expires_at=None
    )
    if created or not policy.limits.exists():
        Limit.objects.create(policy=policy, dimension=Dimension.IP, rate=10, burst=20)
    return policy


@pytest.fixture
def rules(db):
    """A small working copy: free and pro tiers, three tenants, two routes, four policies."""
    from limits.choices import ScopeKind
    from tests.factories import PolicyFactory, RouteFactory, TenantFactory, TierFactory

    default_policy()
    free, pro = (
        TierFactory(slug="free", name="Free"),
        TierFactory(slug="pro", name="Pro"),
    )
    tenants = {
        "acme": TenantFactory(slug="acme", tier=pro),
        "globex": TenantFactory(slug="globex", tier=pro),
        "initech": TenantFactory(slug="initech", tier=free),
    }
    search = RouteFactory(slug="search", path_pattern="/v1/search")
    orders = RouteFactory(
        slug="orders.read", path_pattern="/v1/orders/{id}", methods=["GET"], cost=2
    )
    PolicyFactory(scope=ScopeKind.TIER, tier=free, limit__rate=5, limit__burst=10)
    pro_search = PolicyFactory(
        scope=ScopeKind.TIER, tier=pro, route=search, limit__rate=50, limit__burst=100
    )
    PolicyFactory(
        scope=ScopeKind.TENANT,
        tenant=tenants["globex"],
        route=search,
        limit__rate=2000,
        limit__burst=4000,
    )
    return {
        "free": free,
        "pro": pro,
        **tenants,
        "search": search,
        "orders": orders,
        "pro_search": pro_search,
    }
