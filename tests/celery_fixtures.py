"""A real Celery worker and beat, as subprocesses, on the test worker's own Redis.

They run the project's Celery app against the pytest-django test database, so
tests that use them need ``@pytest.mark.django_db(transaction=True)``: what the
test writes must be committed for the worker to see it. The broker is database
1 of the private Redis (``tests.servers``); database 0 stays the app's.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import redis
from django.db import connection

ROOT = Path(__file__).resolve().parents[1]
#: Seconds a Celery process has to say it is ready, and the default of wait_until:
#: generous, as a loaded machine may take long to start Python and Django. A test
#: that passes never waits for it; one that fails says what it waited for.
READY_TIMEOUT = 120.0


def broker_url(redis_server) -> str:
    """The Celery broker of this test worker: database 1 of its private Redis."""
    return f"redis://127.0.0.1:{redis_server.port}/1"


def database_url() -> str:
    """The test database as a DATABASE_URL a subprocess understands."""
    db = connection.settings_dict
    password = f":{db['PASSWORD']}" if db.get("PASSWORD") else ""
    host, port = db.get("HOST") or "127.0.0.1", db.get("PORT") or 5432
    return f"postgres://{db['USER']}{password}@{host}:{port}/{db['NAME']}"


@dataclass
class CeleryProcess:
    """A Celery subprocess and the log it writes, for waiting and for failure reports."""

    process: subprocess.Popen
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_for(self, text: str, timeout: float = READY_TIMEOUT) -> None:
        """Wait until ``text`` appears in the log; fail with the log if it never does."""
        deadline = time.monotonic() + timeout
        while text not in self.output():
            if self.process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"celery never said {text!r}:\n{self.output()[-4000:]}")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()  # warm shutdown: finishes the task at hand
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


def _start(args: list[str], env: dict[str, str], log: Path) -> CeleryProcess:
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "controlplane", *args],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    return CeleryProcess(process, log)


@pytest.fixture
def celery_env(redis_server, transactional_db) -> dict[str, str]:
    """Environment for Celery subprocesses: the test database, the private Redis,
    an empty broker, and beat's tasks every second."""
    url = broker_url(redis_server)
    redis.Redis.from_url(url).flushdb()  # no message left over from another test
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "controlplane.settings_test",
        "DATABASE_URL": database_url(),
        "REDIS_URL": redis_server.url,
        "CELERY_BROKER_URL": url,
        "SLUICE_ACTIVATION_INTERVAL": "1",
        "SLUICE_STATS_INTERVAL": "1",
    }


@pytest.fixture
def celery_worker(celery_env, tmp_path) -> Iterator[CeleryProcess]:
    """One worker process (solo pool), ready to take tasks."""
    worker = _start(
        [
            "worker",
            "--pool",
            "solo",
            "--without-gossip",
            "--without-mingle",
            "-l",
            "INFO",
        ],
        celery_env,
        tmp_path / "worker.log",
    )
    try:
        worker.wait_for(" ready.")
        yield worker
    finally:
        worker.stop()


@pytest.fixture
def celery_beat(celery_env, tmp_path) -> Iterator[CeleryProcess]:
    """Celery beat with the project's schedule, its state file in the test's tmp dir."""
    beat = _start(
        ["beat", "-l", "INFO", "--schedule", str(tmp_path / "beat-schedule")],
        celery_env,
        tmp_path / "beat.log",
    )
    try:
        beat.wait_for("beat: Starting")
        yield beat
    finally:
        beat.stop()


def wait_until(
    condition, *, timeout: float = READY_TIMEOUT, every: float = 0.2, why: str = ""
):
    """Poll ``condition`` until it returns a true value, and return it; fail after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {why or condition}")
        time.sleep(every)
