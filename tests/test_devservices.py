"""`make run`'s private Postgres and Redis (controlplane/devservices): real initdb clusters
and redis-servers on free loopback ports, started, used and stopped; never the machine's."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import psycopg
import pytest
import redis

from controlplane.devservices import (
    Address,
    PrivatePostgres,
    PrivateRedis,
    StartFailed,
    plan,
)
from tests.servers import free_port

ROOT = Path(__file__).resolve().parent.parent
#: Seconds a server may take to stop here, where the product gives it 4 s (honcho kills
#: it at 5): a fast shutdown writes a checkpoint, which a loaded machine can make slow,
#: and these tests check that stopping is clean, not how fast it is.
PATIENT_STOP = 120.0
#: Seconds the launcher (a subprocess) may take to start, or to stop its servers.
LAUNCHER_TIMEOUT = 200


@pytest.fixture(autouse=True)
def _patient_stop(monkeypatch):
    monkeypatch.setattr("controlplane.devservices.process.STOP_TIMEOUT", PATIENT_STOP)


@pytest.fixture
def var():
    """A var/ of the test's own that the postgres account can reach (tmp_path cannot be)."""
    path = Path(tempfile.mkdtemp(prefix="sluice-devservices-"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _postgres(var: Path, port: int) -> PrivatePostgres:
    url = f"postgres://postgres@127.0.0.1:{port}/sluice"
    return PrivatePostgres(Address("127.0.0.1", port), var / "postgres", url)


def _running_under(path: Path) -> list[str]:
    """Command lines of the processes that mention ``path`` (the servers started there)."""
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if str(path) in cmdline and proc.name != str(os.getpid()):
            found.append(cmdline)
    return found


def test_private_postgres__free_port__initdb_cluster_serves_then_keeps_data_across_restarts(
    var,
):
    # Given a free port where nothing answers
    port = free_port()
    server = _postgres(var, port)
    # When the private Postgres starts for the first time
    server.start()
    try:
        server.wait_ready()
        # Then initdb made a cluster under var/ that the URL's user reaches over TCP only
        with psycopg.connect(
            host="127.0.0.1", port=port, user="postgres", dbname="postgres"
        ) as conn:
            assert conn.execute("SELECT current_user").fetchone() == ("postgres",)
            assert conn.execute("SHOW unix_socket_directories").fetchone() == ("",)
            conn.execute("CREATE TABLE kept (id int)")
    finally:
        server.stop()
    # And a stop is a clean shutdown: the process ended, the port is free, the log says so
    assert server.exited() is not None
    assert not Address("127.0.0.1", port).answers()
    assert "database system is shut down" in (var / "postgres.log").read_text()
    # When it starts again on the same directory
    server = _postgres(var, port)
    server.start()
    try:
        server.wait_ready()
        # Then it is the same cluster (no second initdb): the table is still there
        with psycopg.connect(
            host="127.0.0.1", port=port, user="postgres", dbname="postgres"
        ) as conn:
            assert conn.execute("SELECT to_regclass('kept')::text").fetchone() == (
                "kept",
            )
    finally:
        server.stop()
    assert _running_under(var) == []


def test_private_redis__free_port__answers_then_stops_keeping_nothing(var):
    # Given a free port where nothing answers
    port = free_port()
    url = f"redis://127.0.0.1:{port}/0"
    server = PrivateRedis(Address("127.0.0.1", port), var / f"redis-{port}", url)
    # When the private Redis starts
    server.start()
    try:
        server.wait_ready()
        client = redis.Redis(port=port)
        # Then it answers, and it keeps nothing on disk
        assert client.set("sluice:probe", "1")
        assert client.config_get("save") == {"save": ""}
        assert client.config_get("appendonly") == {"appendonly": "no"}
        client.close()
    finally:
        server.stop()
    assert server.exited() is not None
    assert not Address("127.0.0.1", port).answers()
    assert list((var / f"redis-{port}").iterdir()) == []


def test_plan__one_url_answers_others_silent__starts_only_the_silent_local_ones(
    redis_server, var
):
    # Given Postgres configured where nothing answers, REDIS_URL on a running Redis,
    # and the broker on a second free port
    db_port, broker_port = free_port(), free_port()
    # When planning
    servers, using = plan(
        database={"HOST": "127.0.0.1", "PORT": db_port, "USER": "sluice"},
        database_url=f"postgres://sluice@127.0.0.1:{db_port}/sluice",
        redis_urls={
            "REDIS_URL": redis_server.url,
            "CELERY_BROKER_URL": f"redis://127.0.0.1:{broker_port}/1",
            "ALSO_ON_THE_BROKER": f"redis://127.0.0.1:{broker_port}/2",
        },
        var=var,
    )
    # Then a private Postgres (the URL's user its superuser) and one Redis for the broker's
    # address, and the running Redis is used as it is
    assert [(type(s).__name__, s.url) for s in servers] == [
        ("PrivatePostgres", f"postgres://sluice@127.0.0.1:{db_port}/sluice"),
        ("PrivateRedis", f"redis://127.0.0.1:{broker_port}/1"),
    ]
    assert servers[0].user == "sluice"
    assert using == [f"Redis answers at 127.0.0.1:{redis_server.port}: using it"]


@pytest.mark.parametrize(
    ("database", "redis_urls", "line"),
    [
        (
            {"HOST": "192.0.2.10", "PORT": 5432},
            {},
            "sluice: cannot reach Postgres at postgres://postgres@192.0.2.10:5432/sluice (no answer)",
        ),
        (
            {"HOST": ""},
            {"CELERY_BROKER_URL": "redis://192.0.2.10:6379/1"},
            "sluice: cannot reach Redis at redis://192.0.2.10:6379/1 (no answer)",
        ),
    ],
)
def test_plan__silent_service_on_another_machine__preflight_line_nothing_started(
    database, redis_urls, line, var
):
    # Given a service configured on another machine, which does not answer
    # When planning
    with pytest.raises(StartFailed) as failed:
        plan(
            database=database,
            database_url="postgres://postgres@192.0.2.10:5432/sluice",
            redis_urls=redis_urls,
            var=var,
        )
    # Then preflight's line for it: nothing here could stand in for another machine
    assert str(failed.value).startswith(line)
    assert list(var.iterdir()) == []


SERVE = textwrap.dedent(
    """
    import sys
    from pathlib import Path
    from controlplane.devservices import Address, PrivatePostgres, PrivateRedis, serve
    from controlplane.devservices import process
    process.STOP_TIMEOUT = float(sys.argv[4])  # stopped cleanly, however long it takes
    var, pg_port, redis_port = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    sys.exit(serve([
        PrivateRedis(Address("127.0.0.1", redis_port), var / "redis",
                     f"redis://127.0.0.1:{redis_port}/0"),
        PrivatePostgres(Address("127.0.0.1", pg_port), var / "postgres",
                        f"postgres://postgres:s3cret@127.0.0.1:{pg_port}/sluice"),
    ]))
    """
)


def _serve(var: Path, pg_port: int, redis_port: int) -> subprocess.Popen:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            SERVE,
            str(var),
            str(pg_port),
            str(redis_port),
            str(PATIENT_STOP),
        ],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT])
def test_serve__told_to_stop__every_server_stopped_then_exit_0(var, stop_signal):
    # Given the launcher serving a private Postgres and Redis, as honcho runs it
    pg_port, redis_port = free_port(), free_port()
    launcher = _serve(var, pg_port, redis_port)
    try:
        ready = [launcher.stdout.readline(), launcher.stdout.readline()]
        # Then it says when each is ready, without the URL's password
        assert ready == [
            f"private Redis ready: redis://127.0.0.1:{redis_port}/0\n",
            f"private Postgres ready: postgres://postgres:***@127.0.0.1:{pg_port}/sluice\n",
        ], launcher.stderr.read() if launcher.poll() is not None else ""
        assert Address("127.0.0.1", pg_port).answers()
        assert Address("127.0.0.1", redis_port).answers()
        # When honcho's SIGTERM (or a Ctrl-C's SIGINT) arrives
        launcher.send_signal(stop_signal)
        status = launcher.wait(timeout=LAUNCHER_TIMEOUT)
    finally:
        if launcher.poll() is None:
            launcher.kill()
            launcher.wait()
    # Then it exits 0 only after both servers have ended: no port answers, no process is left
    assert status == 0, launcher.stderr.read()
    assert not Address("127.0.0.1", pg_port).answers()
    assert not Address("127.0.0.1", redis_port).answers()
    assert _running_under(var) == []
    assert "received fast shutdown request" in (var / "postgres.log").read_text()


def test_serve__server_cannot_start__preflight_line_then_exit_1(var):
    # Given a data directory that is not empty and holds no cluster (initdb refuses it)
    (var / "postgres").mkdir()
    (var / "postgres" / "stray-file").write_text("not a cluster")
    pg_port, redis_port = free_port(), free_port()
    # When the launcher starts
    launcher = _serve(var, pg_port, redis_port)
    out, err = launcher.communicate(timeout=LAUNCHER_TIMEOUT)
    # Then it stops at once with preflight's one line, the password hidden, initdb's reason
    # and the log named; the Redis it had started first is stopped again
    assert launcher.returncode == 1
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(
        f"sluice: cannot reach Postgres at postgres://postgres:***@127.0.0.1:{pg_port}/sluice "
        "(nothing answered and a private Postgres did not start: initdb: "
    )
    assert "exists but is not empty" in lines[0]
    assert f"log: {var / 'postgres.log'}" in lines[0]
    assert "or set DATABASE_URL." in lines[0]
    assert out == ""
    assert not Address("127.0.0.1", redis_port).answers()
    assert _running_under(var) == []
