"""Commands run without Postgres or Redis stop with one clear line, not a traceback."""

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.servers import RedisServer, free_port

ROOT = Path(__file__).resolve().parent.parent
POSTGRES_DB = "postgres://postgres@127.0.0.1:5432/postgres"
#: Seconds ``manage.py`` may take to start and answer: generous (Python and Django start
#: slowly on a loaded machine); it only stops a command that hangs.
COMMAND_TIMEOUT = 240
#: ``preflight --wait`` for a Redis that does start: long enough for any start, as the
#: test is about answering once it is up, not how soon.
PATIENT_WAIT = 120


def _manage(*args, timeout: float = COMMAND_TIMEOUT, **env):
    environment = {**os.environ, **env}
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.mark.parametrize("command", [["migrate"], ["preflight"], ["showmigrations"]])
def test_manage__postgres_unreachable__one_line_naming_url_and_fix(command):
    # Given a DATABASE_URL where nothing listens (with a password that must not be printed)
    url = f"postgres://postgres:s3cret@127.0.0.1:{free_port()}/sluice"
    # When running a command that needs the database
    result = _manage(*command, DATABASE_URL=url)
    # Then it fails with one line that names the URL (password hidden) and how to start Postgres
    assert result.returncode != 0
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert f"127.0.0.1:{url.rsplit(':', 1)[1].split('/')[0]}" in lines[0]
    assert "cannot reach Postgres" in lines[0]
    assert "pg_ctlcluster" in lines[0]
    assert "s3cret" not in lines[0]


def test_preflight__redis_unreachable__one_line_naming_url_and_fix():
    # Given a reachable Postgres database (the maintenance one always exists) and no Redis
    url = f"redis://127.0.0.1:{free_port()}/0"
    result = _manage("preflight", REDIS_URL=url, DATABASE_URL=POSTGRES_DB)
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert f"cannot reach Redis at {url}" in result.stderr
    assert "redis-server" in result.stderr


def test_preflight__database_missing__says_how_to_create_it():
    result = _manage(
        "preflight",
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/sluice_does_not_exist",
    )
    assert result.returncode != 0
    assert "does not exist" in result.stderr
    assert "--create-database" in result.stderr


def test_preflight_wait__redis_that_starts_late__answers_once_it_is_up():
    # Given REDIS_URL and CELERY_BROKER_URL on a port where a Redis starts a second later
    # (as make run's private one does)
    server = RedisServer(port=free_port())
    started: list[BaseException | None] = []

    def start_late():
        try:
            server.start()
            started.append(None)
        except BaseException as exc:  # reported by the test, not lost in the thread
            started.append(exc)

    starter = threading.Timer(1.0, start_late)
    starter.start()
    try:
        # When preflight waits for it (long enough for a slow start)
        result = _manage(
            "preflight",
            "--wait",
            str(PATIENT_WAIT),
            DATABASE_URL=POSTGRES_DB,
            REDIS_URL=server.url,
            CELERY_BROKER_URL=f"redis://127.0.0.1:{server.port}/1",
        )
    finally:
        starter.join()
        server.cleanup()
    # Then it succeeds once the server answers
    assert started == [None], started
    assert result.returncode == 0, result.stderr
    assert f"Redis {server.url} answer." in result.stdout


def test_preflight_wait__broker_never_answers__one_line_naming_celery_broker_url():
    # Given a broker URL where nothing listens (REDIS_URL fine)
    url = f"redis://127.0.0.1:{free_port()}/1"
    # When preflight waits a second for it
    result = _manage(
        "preflight", "--wait", "1", DATABASE_URL=POSTGRES_DB, CELERY_BROKER_URL=url
    )
    # Then, time up, one line naming the URL and the setting to change
    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [result.stderr.strip()]
    assert f"cannot reach Redis at {url}" in result.stderr
    assert result.stderr.strip().endswith("or set CELERY_BROKER_URL.")


def test_preflight_wait__database_missing__fails_at_once():
    # Given a Postgres that answers without the database
    wait = 200
    began = time.monotonic()
    # When preflight may wait longer than any start takes, but is not asked to create it
    # (the command is given no longer than that wait: one that waited would time out)
    result = _manage(
        "preflight",
        "--wait",
        str(wait),
        DATABASE_URL="postgres://postgres@127.0.0.1:5432/sluice_does_not_exist",
        timeout=wait,
    )
    # Then it does not wait: it fails before the time it was given runs out, as
    # waiting would not bring the database
    assert result.returncode != 0
    assert "--create-database" in result.stderr
    assert time.monotonic() - began < wait
