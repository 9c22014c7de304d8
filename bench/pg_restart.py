"""Postgres restarted during a publish, on a private PostgreSQL cluster: a real restart.

The machine's Postgres is shared, so this starts its own cluster with Debian's
``initdb`` / ``pg_ctl`` (run as the ``postgres`` user) in a temporary directory
on 127.0.0.1:``--port``, loads a working copy large enough that a publish takes
a while, and restarts the cluster (``pg_ctl restart -m fast``) while a publish
runs in another process: once just after the publish took its lock, once just
after it inserted its snapshot row (the last moments before it commits). After
each it checks what Postgres holds (``bench_check``: consecutive versions,
whole documents, the bundle in Redis equal to Postgres's) and that the next
publish goes through. ``tests/faults/test_postgres_faults.py`` asserts the same
with ``pg_terminate_backend`` in the test suite. Prints Markdown.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import psycopg

from bench.common import PYTHON, ROOT, bench_env, machine_line, manage, table
from tests.servers import RedisServer

#: (what the restart interrupts, the pg_locks query that says the publish got there)
MOMENTS = (
    (
        "publish lock taken",
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted",
    ),
    (
        "snapshot row inserted",
        "SELECT l.pid FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
        "WHERE c.relname = 'limits_snapshot' AND l.mode = 'RowExclusiveLock' "
        "AND l.granted AND l.pid <> pg_backend_pid()",
    ),
)


class Cluster:
    """A throw-away PostgreSQL cluster owned by the ``postgres`` user."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.bin = Path(sorted(glob.glob("/usr/lib/postgresql/*/bin"))[-1])
        self.dir = Path(tempfile.mkdtemp(prefix="sluice-pg-"))
        owner = pwd.getpwnam("postgres")
        os.chown(self.dir, owner.pw_uid, owner.pw_gid)
        self.data = self.dir / "data"

    def pg(self, tool: str, *args: str) -> None:
        """Run a PostgreSQL tool as ``postgres``; the server it starts logs to a file,
        never to our pipes (which it would hold open)."""
        command = ["runuser", "-u", "postgres", "--", str(self.bin / tool), *args]
        subprocess.run(
            command,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=120,
        )

    def ctl(self, *args: str) -> None:
        log = str(self.dir / "log")
        self.pg(
            "pg_ctl",
            "-D",
            str(self.data),
            "-l",
            log,
            "-w",
            "-o",
            self._options(),
            *args,
        )

    def start(self) -> Cluster:
        self.pg(
            "initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync"
        )
        self.ctl("start")
        return self

    def _options(self) -> str:
        return f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1"

    def restart(self) -> float:
        """Fast restart (every backend ended, a checkpoint, up again); seconds it took."""
        began = time.perf_counter()
        self.ctl("-m", "fast", "restart")
        return time.perf_counter() - began

    def cleanup(self) -> None:
        try:
            self.pg("pg_ctl", "-D", str(self.data), "-m", "immediate", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def url(self, name: str) -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{name}"


def wait_for(
    url: str, query: str, process: subprocess.Popen, timeout: float = 120
) -> bool:
    """Poll ``query`` until it finds the publish there; False if the publish ended first."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(url, autocommit=True) as admin:
        while process.poll() is None and time.monotonic() < deadline:
            if admin.execute(query).fetchone():
                return True
            time.sleep(0.002)
    return False


def failure(stderr: str) -> str:
    """The reason in the one line ``manage.py`` prints for a lost database."""
    line = (stderr.strip().splitlines() or ["?"])[-1]
    found = re.search(r"\(([^()]*)\)[;.]", line)
    return found.group(1) if found else line[:100]


def interrupt(
    cluster: Cluster, env: dict[str, str], moment: tuple[str, str]
) -> list[str]:
    """One publish, restarted at ``moment``; the table row of what came of it."""
    name, query = moment
    publish = subprocess.Popen(
        [PYTHON, str(ROOT / "manage.py"), "bench_publish"],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    caught = wait_for(env["DATABASE_URL"], query, publish)
    restart = cluster.restart() if caught else 0.0
    out, err = publish.communicate(timeout=120)
    outcome = (
        f"completed: version {out.strip()}"
        if publish.returncode == 0
        else f"failed: {failure(err)}"
    )
    check = json.loads(manage(env, "bench_check"))
    after = manage(env, "bench_publish").strip()
    whole = (
        check["consecutive"] and check["documents_whole"] and check["bundle_matches"]
    )
    return [
        name if caught else f"{name} (missed: publish ended first)",
        f"{restart:.1f} s",
        outcome,
        str(check["versions"]),
        str(check["active"]),
        "yes" if whole else "**no**",
        f"version {after}",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=8250)
    parser.add_argument("--tenants", type=int, default=20_000)
    options = parser.parse_args()
    print(
        f"## Postgres restarted during a publish (private cluster)\n\n{machine_line()}\n"
    )
    if os.geteuid() != 0 or not glob.glob("/usr/lib/postgresql/*/bin/initdb"):
        print(
            "Skipped: needs root (to run initdb as postgres) and PostgreSQL binaries."
        )
        return
    cluster, redis = Cluster(options.port).start(), RedisServer().start()
    try:
        env = {
            **bench_env(redis.url),
            "DATABASE_URL": cluster.url("sluice_pgfault_bench"),
        }
        manage(env, "preflight", "--create-database")
        manage(env, "migrate", "--noinput", "-v", "0")
        manage(
            env,
            "bench_rules",
            "--tenants",
            str(options.tenants),
            "--overrides",
            str(options.tenants // 5),
        )
        manage(env, "bench_publish")
        rows = [interrupt(cluster, env, moment) for moment in MOMENTS]
    finally:
        redis.cleanup()
        cluster.cleanup()
    print(
        f"{options.tenants:,} tenants; version 1 published first. Each row: a publish "
        "in another process, Postgres restarted (fast) at that moment, then the check "
        "and one more publish.\n"
    )
    print(
        table(
            [
                "restarted after",
                "restart",
                "the publish",
                "versions",
                "active",
                "whole and consistent",
                "next publish",
            ],
            rows,
        )
    )


if __name__ == "__main__":
    main()
