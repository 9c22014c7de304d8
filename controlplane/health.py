"""``/healthz`` and ``/readyz``: for load balancers, Kubernetes probes and ``docker compose``.

* ``/healthz``: the process answers (liveness). 200, always, touching nothing.
* ``/readyz``: the process can serve (readiness): Postgres answers, Redis
  (``REDIS_URL``) answers, and every migration on disk is applied. 200 when all
  pass, else 503; ``?exclude=redis`` (names, comma-separated or repeated) leaves
  checks out, as Kubernetes' own ``/readyz`` does.

Both answer before any other middleware, so no authentication, host check
(``ALLOWED_HOSTS``: a probe comes with the pod's address as its host), HTTPS
redirect or request log stands in their way, and nothing rate-limits them. They
say only ``ok`` or ``failing`` per check: what failed and why (URLs, errors) goes
to the server log, never to a stranger. A readiness check costs one query (the
applied migrations, which is the Postgres check too) and one Redis PING.

``/readyz`` answers within about ``DATABASE_TIMEOUT`` seconds whatever Postgres
and Redis do: the query runs in a thread of its own, on a connection of its own,
while the Redis PING (``REDIS_TIMEOUT``, shorter) waits in the probe's thread; a
Postgres that has not answered by then is ``failing``. A check
still waiting is shared by the probes that come meanwhile, so a hung Postgres
holds one thread, never one per probe. ``/healthz`` touches neither.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from concurrent.futures import Future

import redis
from django.db import DatabaseError, connection
from django.db.migrations.loader import MigrationLoader
from django.http import HttpResponse

from limits.core.store import redis_client

__all__ = ["HealthCheckMiddleware", "readiness"]

log = logging.getLogger("sluice.health")

LIVE_PATH, READY_PATH = "/healthz", "/readyz"
#: Seconds the Redis check waits for PONG: a probe must answer sooner than it times out.
REDIS_TIMEOUT = 1.0
#: Seconds the Postgres check waits for its query, connecting included.
DATABASE_TIMEOUT = 2.0
OK, FAILING = "ok", "failing"


@functools.cache
def _migrations_on_disk() -> frozenset[tuple[str, str]]:
    """The latest migration of every app, read from disk once (code does not change under
    a running process): all applied exactly when these are."""
    return frozenset(
        MigrationLoader(None, ignore_no_migrations=True).graph.leaf_nodes()
    )


def _applied_migrations() -> set[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT app, name FROM django_migrations")
        return set(cursor.fetchall())


def _check_database() -> dict[str, str]:
    """Postgres and the migrations, with the one query that tells both."""
    try:
        applied = _applied_migrations()
    except DatabaseError as exc:
        reason = f"{type(exc).__name__}: {exc}".strip()
        if "django_migrations" in reason:  # Postgres answers; nothing migrated yet
            log.warning("readyz: migrations failing: %s", reason)
            return {"postgres": OK, "migrations": FAILING}
        log.warning("readyz: postgres failing: %s", reason)
        return {"postgres": FAILING, "migrations": FAILING}
    missing = _migrations_on_disk() - applied
    if missing:
        log.warning("readyz: migrations not applied: %s", sorted(missing))
    return {"postgres": OK, "migrations": FAILING if missing else OK}


_pending_lock = threading.Lock()
_pending: Future | None = None


def _check_database_in_thread(future: Future) -> None:
    try:
        future.set_result(_check_database())
    except BaseException as exc:  # raised again in the probe that waits
        future.set_exception(exc)
    finally:
        connection.close()  # this thread's own connection


def _database_check_started() -> Future:
    """The Postgres check running in its thread: a new one, or the one still waiting."""
    global _pending
    with _pending_lock:
        if _pending is None or _pending.done():
            _pending = Future()
            threading.Thread(
                target=_check_database_in_thread,
                args=(_pending,),
                name="readyz-postgres",
                daemon=True,
            ).start()
        return _pending


def _database_check_result(future: Future, deadline: float) -> dict[str, str]:
    """The Postgres check's result, or ``failing`` if it has none by ``deadline``."""
    try:
        return future.result(timeout=max(0.0, deadline - time.monotonic()))
    except TimeoutError:
        log.warning("readyz: postgres failing: no answer within %s s", DATABASE_TIMEOUT)
        return {"postgres": FAILING, "migrations": FAILING}


def _check_redis() -> dict[str, str]:
    try:
        redis_client(timeout=REDIS_TIMEOUT).ping()
    except redis.RedisError as exc:
        log.warning("readyz: redis failing: %s: %s", type(exc).__name__, exc)
        return {"redis": FAILING}
    return {"redis": OK}


def readiness(*, exclude: frozenset[str] = frozenset()) -> dict[str, str]:
    """Each check's name and ``ok`` or ``failing``, those in ``exclude`` left out.

    Postgres is asked first, in its thread; Redis is pinged while it answers."""
    deadline = time.monotonic() + DATABASE_TIMEOUT
    database = None
    if not {"postgres", "migrations"} <= exclude:
        database = _database_check_started()
    checks = {} if "redis" in exclude else _check_redis()
    if database is not None:
        checks.update(_database_check_result(database, deadline))
    return {name: state for name, state in checks.items() if name not in exclude}


def _answer(status: int, body: dict) -> HttpResponse:
    response = HttpResponse(
        json.dumps(body), status=status, content_type="application/json"
    )
    response["Cache-Control"] = "no-store"
    return response


def _excluded(request) -> frozenset[str]:
    names = ",".join(request.GET.getlist("exclude"))
    return frozenset(name.strip() for name in names.split(",") if name.strip())


class HealthCheckMiddleware:
    """Answers ``/healthz`` and ``/readyz`` itself; passes every other request on.

    First in ``MIDDLEWARE``: see the module docstring for why.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        path = request.path_info.rstrip("/")
        if path not in (LIVE_PATH, READY_PATH):
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            response = _answer(405, {"status": "method not allowed"})
            response["Allow"] = "GET, HEAD"
            return response
        if path == LIVE_PATH:
            return _answer(200, {"status": OK})
        checks = readiness(exclude=_excluded(request))
        ready = all(state == OK for state in checks.values())
        return _answer(
            200 if ready else 503,
            {"status": OK if ready else FAILING, "checks": checks},
        )
