"""Turn "Postgres or Redis is not running" into one clear line instead of a traceback."""

from __future__ import annotations

import time
from collections.abc import Callable
from urllib.parse import urlsplit, urlunsplit

import dj_database_url
import psycopg
import redis
from django.conf import settings
from django.db.utils import OperationalError as DjangoOperationalError

START_POSTGRES = (
    "start it (Debian: pg_ctlcluster --skip-systemctl-redirect $(ls /etc/postgresql) main start; "
    "Docker: docker compose up -d postgres) or set DATABASE_URL"
)
START_REDIS = (
    "start it (redis-server --daemonize yes --port 6379 --save ''; "
    "Docker: docker compose up -d redis) or set"
)


class ServiceUnavailable(Exception):
    """A backing service that cannot be reached; the message says which and what to do."""


class DatabaseMissing(ServiceUnavailable):
    """Postgres answers, but the database is not there (waiting will not bring it)."""


def redact(url: str) -> str:
    """Return ``url`` without its password, fit to print."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def explain_unavailable(exc: BaseException) -> str | None:
    """Return the one-line explanation for a connection failure, or None for other errors."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, DjangoOperationalError | psycopg.OperationalError):
            return postgres_message(seen)
        if isinstance(seen, redis.ConnectionError | redis.TimeoutError):
            return redis_unreachable(settings.REDIS_URL, _first_line(seen))
        seen = seen.__cause__ or seen.__context__
    return None


def postgres_message(exc: BaseException) -> str:
    reason = _first_line(exc)
    if "does not exist" in reason:
        url = redact(settings.DATABASE_URL)
        return f"sluice: {reason} at {url}; create it with: python manage.py preflight --create-database."
    return postgres_unreachable(settings.DATABASE_URL, reason)


def postgres_unreachable(url: str, reason: str) -> str:
    """The one line for a Postgres at ``url`` that does not answer, and why."""
    return (
        f"sluice: cannot reach Postgres at {redact(url)} ({reason}); {START_POSTGRES}."
    )


def redis_unreachable(url: str, reason: str, *, setting: str = "REDIS_URL") -> str:
    """The one line for a Redis at ``url`` (the value of ``setting``) that does not answer."""
    return f"sluice: cannot reach Redis at {redact(url)} ({reason}); {START_REDIS} {setting}."


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def check_redis(url: str, *, setting: str = "REDIS_URL") -> None:
    """Raise ServiceUnavailable unless Redis at ``url`` (the value of ``setting``) answers PING."""
    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise ServiceUnavailable(
            redis_unreachable(url, _first_line(exc), setting=setting)
        ) from None
    finally:
        client.close()


def check_postgres(*, create_database: bool) -> bool:
    """Raise ServiceUnavailable unless Postgres answers; create the database if asked.

    Returns True when the database was created. Creating it takes a role that may:
    asked to, this connects as ``DATABASE_ADMIN_URL`` (the roles of
    ``DATABASE_URL`` may not exist before ``manage.py db_roles`` runs).
    """
    db = settings.DATABASES["default"]
    if create_database:
        db = {**dj_database_url.parse(settings.DATABASE_ADMIN_URL), "NAME": db["NAME"]}
    params = {
        "host": db.get("HOST") or None,
        "port": db.get("PORT") or None,
        "user": db.get("USER") or None,
        "password": db.get("PASSWORD") or None,
        "connect_timeout": 3,
        "autocommit": True,
    }
    try:
        with psycopg.connect(dbname="postgres", **params) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", [db["NAME"]]
            ).fetchone()
            if exists:
                return False
            if not create_database:
                raise DatabaseMissing(
                    f"sluice: database {db['NAME']!r} does not exist at {redact(settings.DATABASE_URL)}; "
                    "create it with: python manage.py preflight --create-database."
                )
            conn.execute(f'CREATE DATABASE "{db["NAME"]}"')
            return True
    except psycopg.OperationalError as exc:
        raise ServiceUnavailable(postgres_message(exc)) from None


def check_services(*, create_database: bool) -> bool:
    """Raise ServiceUnavailable unless Postgres and both Redis URLs answer (see check_postgres).

    Returns True when the database was created.
    """
    created = check_postgres(create_database=create_database)
    check_redis(settings.REDIS_URL)
    check_redis(settings.CELERY_BROKER_URL, setting="CELERY_BROKER_URL")
    return created


def wait_for_services(
    *,
    timeout: float,
    create_database: bool,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> bool:
    """check_services, again every half second until it passes or ``timeout`` seconds pass.

    For services that are still starting (``make run``'s private ones). Raises the last
    ServiceUnavailable when time is up, and DatabaseMissing at once (waiting will not
    create a database). Returns True when the database was created.
    """
    deadline = clock() + timeout
    while True:
        try:
            return check_services(create_database=create_database)
        except DatabaseMissing:
            raise
        except ServiceUnavailable:
            if clock() >= deadline:
                raise
        sleep(0.5)
