"""A database that is down, or accepts connections and never answers (issue 25).

The control plane runs in a fresh interpreter whose ``DATABASE_URL`` points at a
port where nothing listens, or at a listener of the test's own that accepts TCP
connections and never says a word. It must keep answering: ``/healthz`` 200,
``/readyz`` 503 saying Postgres is failing, an API read 503 problem+json with
``Retry-After``, an admin page a plain 503 page with ``Retry-After``, each well
before gunicorn would kill the worker (30 s).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.servers import free_port

ROOT = Path(__file__).resolve().parent.parent
#: Seconds the control plane may take to connect: what an operator would set.
CONNECT_TIMEOUT = 2
#: gunicorn kills a worker after 30 s: every answer must come well before.
WORKER_TIMEOUT = 30.0
#: Seconds the whole subprocess may take: it only stops one that hangs.
COMMAND_TIMEOUT = 240
#: The requests a probe and a CI job make, each answered and timed in the subprocess.
ASK = """
import json, time, django
django.setup()
from django.test import Client
client = Client(HTTP_HOST="localhost", raise_request_exception=False)
found = {}
for path, extra in (
    ("/healthz", {}),
    ("/readyz?exclude=redis", {}),
    ("/api/v1/tiers", {"HTTP_AUTHORIZATION": "Bearer slu_looked-up-in-a-database-that-is-gone"}),
    ("/admin/", {"HTTP_COOKIE": "sessionid=a-session-in-the-database"}),
    ("/admin/limits/tier/", {"HTTP_COOKIE": "sessionid=a-session-in-the-database"}),
):
    started = time.monotonic()
    response = client.get(path, **extra)
    found[path.split("?")[0]] = {
        "status": response.status_code,
        "seconds": time.monotonic() - started,
        "type": response["Content-Type"],
        "retry_after": response.get("Retry-After"),
        "body": json.loads(response.content) if "json" in response["Content-Type"]
        else response.content.decode(),
    }
print(json.dumps(found))
"""


@pytest.fixture
def silent_postgres() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections and never answers on them."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:  # closed: the test is over
                return
            accepted.append(conn)  # held open, never read from nor written to

    threading.Thread(target=accept, daemon=True).start()
    yield listener.getsockname()[1]
    listener.close()
    for conn in accepted:
        conn.close()


def _run(script: str, port: int, **env: str) -> tuple[dict, str]:
    """What ``script`` prints last (JSON), run by the control plane on database
    ``port``, and its log."""
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        env={
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "controlplane.settings_test",
            "DATABASE_URL": f"postgres://sluice@127.0.0.1:{port}/sluice",
            "SLUICE_DB_CONNECT_TIMEOUT": str(CONNECT_TIMEOUT),
            **env,
        },
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1]), done.stderr


def _assert_still_answering(port: int) -> None:
    found, log = _run(ASK, port)
    # /healthz never touches the database
    assert (found["/healthz"]["status"], found["/healthz"]["body"]) == (
        200,
        {"status": "ok"},
    )
    # /readyz says Postgres is failing, and says it in time
    readyz = found["/readyz"]
    assert readyz["status"] == 503
    assert readyz["body"] == {
        "status": "failing",
        "checks": {"postgres": "failing", "migrations": "failing"},
    }
    # without what failed and why, which the server log has
    assert str(port) not in json.dumps(readyz["body"])
    assert "readyz: postgres failing" in log
    # An API read: 503, a problem document naming the cause, and when to retry
    tiers = found["/api/v1/tiers"]
    assert tiers["status"] == 503
    assert tiers["type"] == "application/problem+json"
    assert tiers["body"]["error"] == "database_unavailable"
    assert "database is unavailable" in tiers["body"]["detail"]
    assert int(tiers["retry_after"]) > 0
    # The admin: a plain 503 page saying so, and when to retry (it was a 500)
    for page in ("/admin/", "/admin/limits/tier/"):
        assert found[page]["status"] == 503, found[page]
        assert found[page]["type"].startswith("text/html")
        assert "The database is unavailable" in found[page]["body"]
        assert int(found[page]["retry_after"]) > 0
    for answer in found.values():
        assert answer["seconds"] < WORKER_TIMEOUT / 2


def test_postgres_accepts_and_never_answers__everything_answers_in_time(
    silent_postgres,
):
    _assert_still_answering(silent_postgres)


def test_postgres_down__api_503_not_500_and_readyz_503():
    _assert_still_answering(free_port())


READYZ = """
import json, time, django
django.setup()
from django.test import Client
started = time.monotonic()
response = Client(HTTP_HOST="localhost").get("/readyz")
print(json.dumps({"status": response.status_code, "body": json.loads(response.content),
                  "seconds": time.monotonic() - started}))
"""


def test_postgres_and_redis_both_silent__readyz_503_both_failing_in_time(
    silent_postgres,
):
    # Given a Postgres and a Redis that accept connections and never answer
    # When a probe asks whether the control plane is ready
    found, log = _run(
        READYZ, silent_postgres, REDIS_URL=f"redis://127.0.0.1:{silent_postgres}/0"
    )
    # Then it says each is failing (the two checks wait side by side, not one
    # after the other), well before gunicorn would kill the worker
    assert found["status"] == 503
    assert found["body"]["checks"] == {
        "postgres": "failing",
        "migrations": "failing",
        "redis": "failing",
    }
    assert found["seconds"] < WORKER_TIMEOUT / 2
    assert "readyz: redis failing" in log
