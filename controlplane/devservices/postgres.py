"""A private PostgreSQL cluster: Debian's initdb and postgres, never as root."""

from __future__ import annotations

import os
import pwd
import shutil
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

from controlplane.devservices.process import (
    START_TIMEOUT,
    Address,
    ServerProcess,
    StartFailed,
    polls,
)
from controlplane.preflight import postgres_unreachable

#: How the lines that say why postgres stopped begin (after the log line prefix).
SERVER_ERROR = r"\b(FATAL|PANIC|ERROR):"
INITDB_ERROR = r"\berror:"
#: Where Debian keeps the server binaries (initdb, postgres): off the PATH, one per version.
POSTGRES_BIN_DIRS = Path("/usr/lib/postgresql")


def postgres_bin_dir() -> Path:
    """The directory of ``initdb`` and ``postgres``: the PATH's, else Debian's newest."""
    initdb = shutil.which("initdb")
    if initdb is not None:
        return Path(initdb).resolve().parent
    versions = [
        path.parent
        for path in POSTGRES_BIN_DIRS.glob("*/bin/initdb")
        if path.parent.parent.name.replace(".", "").isdigit()
    ]
    if not versions:
        raise FileNotFoundError("initdb not found (Debian: apt-get install postgresql)")
    return max(versions, key=lambda bin_dir: float(bin_dir.parent.name))


def server_account() -> pwd.struct_passwd | None:
    """The unprivileged account Postgres runs as when this process is root; None otherwise.

    initdb and postgres refuse to run as root, so root runs them as ``postgres``.
    """
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        raise FileNotFoundError(
            "initdb refuses to run as root and there is no 'postgres' account"
        ) from None


@dataclass
class PrivatePostgres:
    """A PostgreSQL cluster in ``data`` served in the foreground on ``address``.

    Created by initdb on first start (trust authentication, ``user`` its superuser),
    kept afterwards. No Unix socket: it never meets the machine's clusters in
    /var/run/postgresql. Stopped with a fast shutdown (SIGINT): sessions end, a
    checkpoint is written, nothing committed is lost. The log is ``log``, by default
    next to ``data`` (``var/postgres.log``).
    """

    address: Address
    data: Path
    url: str
    user: str = "postgres"
    log: Path | None = None
    name: str = "Postgres"
    _server: ServerProcess = field(init=False)

    def __post_init__(self) -> None:
        log = self.log or self.data.with_name(self.data.name + ".log")
        self._server = ServerProcess(log, stop_signal=signal.SIGINT)

    def start(self) -> None:
        """Create the cluster if ``data`` holds none, then start postgres."""
        try:
            bin_dir = postgres_bin_dir()
            account = server_account()
        except FileNotFoundError as exc:
            raise StartFailed(self._failed(str(exc))) from None
        options = self._run_as(account)
        if not (self.data / "PG_VERSION").exists():
            self._initdb(bin_dir, options)
        listen = ",".join(self.address.bind_addresses())
        postgres = [str(bin_dir / "postgres"), "-D", str(self.data)]
        postgres += ["-p", str(self.address.port), "-c", f"listen_addresses={listen}"]
        postgres += ["-c", "unix_socket_directories="]
        self._server.spawn(postgres, **options)

    def _run_as(self, account: pwd.struct_passwd | None) -> dict[str, Any]:
        """Popen options that run a Postgres tool as ``account``, in ``data`` (made theirs)."""
        self.data.mkdir(parents=True, exist_ok=True)
        options: dict[str, Any] = {"cwd": self.data}
        if account is not None:
            os.chown(self.data, account.pw_uid, account.pw_gid)
            options.update(user=account.pw_uid, group=account.pw_gid, extra_groups=[])
        self.data.chmod(0o700)
        return options

    def _initdb(self, bin_dir: Path, options: dict[str, Any]) -> None:
        initdb = ServerProcess(self._server.log)
        command = [str(bin_dir / "initdb"), "-D", str(self.data), "-U", self.user]
        command += ["-A", "trust", "-E", "UTF8", "--no-locale"]
        initdb.spawn(command, **options)
        assert initdb.process is not None
        try:
            status = initdb.process.wait(timeout=START_TIMEOUT)
        except BaseException:  # asked to stop meanwhile, or too slow
            initdb.stop()
            raise
        if status != 0:
            raise StartFailed(self._failed(f"initdb: {initdb.reason(INITDB_ERROR)}"))

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Return once the cluster accepts a session; StartFailed if it ends or time runs out."""
        for _ in polls(timeout):
            if self._server.exited() is not None:
                raise StartFailed(self._failed(self._server.reason(SERVER_ERROR)))
            try:
                with psycopg.connect(
                    host=self.address.host,
                    port=self.address.port,
                    user=self.user,
                    dbname="postgres",
                    connect_timeout=2,
                ):
                    return
            except psycopg.OperationalError:
                continue
        raise StartFailed(self._failed(f"no answer {timeout:g} s after starting"))

    def exited(self) -> int | None:
        """The postgres exit status once it has ended; None while it runs."""
        return self._server.exited()

    def stop(self) -> None:
        """Fast shutdown, and wait for it."""
        self._server.stop()

    def _failed(self, why: str) -> str:
        reason = f"nothing answered and a private Postgres did not start: {why}; log: {self._server.log}"
        return postgres_unreachable(self.url, reason)
