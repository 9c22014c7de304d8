"""Turn "Postgres or Redis is not running" into one clear line instead of a traceback."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

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
    "Docker: docker compose up -d redis) or set REDIS_URL"
)


class ServiceUnavailable(Exception):
    """A backing service that cannot be reached; the message says which and what to do."""


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
            return f"sluice: cannot reach Redis at {redact(settings.REDIS_URL)} ({_first_line(seen)}); {START_REDIS}."
        seen = seen.__cause__ or seen.__context__
    return None


def postgres_message(exc: BaseException) -> str:
    url = redact(settings.DATABASE_URL)
    reason = _first_line(exc)
    if "does not exist" in reason:
        return f"sluice: {reason} at {url}; create it with: python manage.py preflight --create-database."
    return f"sluice: cannot reach Postgres at {url} ({reason}); {START_POSTGRES}."


def _first_line(exc: BaseException) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    return lines[-1] if lines else type(exc).__name__


def check_redis(url: str) -> None:
    """Raise ServiceUnavailable unless Redis at ``url`` answers PING."""
    client = redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=2)
    try:
        client.ping()
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        raise ServiceUnavailable(
            f"sluice: cannot reach Redis at {redact(url)} ({_first_line(exc)}); {START_REDIS}."
        ) from None
    finally:
        client.close()


def check_postgres(*, create_database: bool) -> bool:
    """Raise ServiceUnavailable unless Postgres answers; create the database if asked.

    Returns True when the database was created.
    """
    db = settings.DATABASES["default"]
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
                raise ServiceUnavailable(
                    f"sluice: database {db['NAME']!r} does not exist at {redact(settings.DATABASE_URL)}; "
                    "create it with: python manage.py preflight --create-database."
                )
            conn.execute(f'CREATE DATABASE "{db["NAME"]}"')
            return True
    except psycopg.OperationalError as exc:
        raise ServiceUnavailable(postgres_message(exc)) from None
