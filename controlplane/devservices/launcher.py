"""Which private servers a run needs, and the foreground process that keeps them."""

from __future__ import annotations

import getpass
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import FrameType
from typing import IO, Any, NoReturn
from urllib.parse import urlsplit

from controlplane.devservices.postgres import PrivatePostgres
from controlplane.devservices.process import Address, PrivateServer, StartFailed
from controlplane.devservices.redis_server import PrivateRedis
from controlplane.preflight import postgres_unreachable, redact, redis_unreachable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)

#: A configured service: where it should answer, what would stand in, the line if nothing can.
Candidate = tuple[Address, PrivateServer, str]


class Stop(Exception):
    """Raised by the signal handler: honcho (or Ctrl-C) asked this process to stop."""


def plan(
    *,
    database: Mapping[str, Any],
    database_url: str,
    redis_urls: Mapping[str, str],
    var: Path,
) -> tuple[list[PrivateServer], list[str]]:
    """The private servers to start, and a line for each configured service used as it is.

    ``database`` is Django's ``DATABASES["default"]`` (one without HOST uses a Unix
    socket: nothing to do); ``redis_urls`` maps each setting name to its URL, and
    settings on one address share a server. A service nothing answers for on another
    machine raises StartFailed: no server started here could stand in for it.
    """
    servers: list[PrivateServer] = []
    using: list[str] = []
    for address, server, failure in _candidates(
        database, database_url, redis_urls, var
    ):
        if address.answers():
            using.append(f"{server.name} answers at {address}: using it")
        elif address.is_local():
            servers.append(server)
        else:
            raise StartFailed(failure)
    return servers, using


def _candidates(
    database: Mapping[str, Any],
    database_url: str,
    redis_urls: Mapping[str, str],
    var: Path,
) -> list[Candidate]:
    found: list[Candidate] = []
    if database.get("HOST"):
        address = Address(database["HOST"], int(database.get("PORT") or 5432))
        user = database.get("USER") or getpass.getuser()
        server = PrivatePostgres(address, var / "postgres", database_url, user=user)
        found.append((address, server, postgres_unreachable(database_url, "no answer")))
    seen: set[Address] = set()
    for setting, url in redis_urls.items():
        parts = urlsplit(url)
        if (
            parts.scheme != "redis"
        ):  # TLS or a Unix socket: not something to stand in for
            continue
        address = Address(parts.hostname or "localhost", parts.port or 6379)
        if address in seen:
            continue
        seen.add(address)
        redis = PrivateRedis(
            address, var / f"redis-{address.port}", url, setting=setting
        )
        found.append(
            (address, redis, redis_unreachable(url, "no answer", setting=setting))
        )
    return found


def serve(servers: Sequence[PrivateServer], *, out: IO[str] = sys.stdout) -> int:
    """Start ``servers``, wait until they answer, keep them until asked to stop.

    Returns 0 after a requested stop (SIGTERM, SIGINT) and 1 when a server fails to
    start or ends by itself (its one line on stderr). Every server it started is
    stopped before it returns; with no servers it just waits to be stopped.
    """
    started: list[PrivateServer] = []
    previous = {sig: signal.signal(sig, _raise_stop) for sig in STOP_SIGNALS}
    try:
        for server in servers:
            started.append(server)
            server.start()
        for server in servers:
            server.wait_ready()
            print(
                f"private {server.name} ready: {redact(server.url)}",
                file=out,
                flush=True,
            )
        _watch(started)
    except Stop:
        return 0
    except StartFailed as exc:
        print(str(exc), file=sys.stderr, flush=True)
        return 1
    finally:
        for sig in STOP_SIGNALS:  # a second Ctrl-C must not cut the shutdown short
            signal.signal(sig, signal.SIG_IGN)
        for server in reversed(started):
            server.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _watch(servers: Sequence[PrivateServer]) -> NoReturn:
    """Sleep until asked to stop (Stop); StartFailed when a server ends by itself."""
    while True:
        for server in servers:
            status = server.exited()
            if status is not None:
                raise StartFailed(
                    f"sluice: the private {server.name} for {redact(server.url)} ended "
                    f"(exit status {status}); its log is under var/."
                )
        time.sleep(1)


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise Stop(signal.Signals(signum).name)


def wait_for(path: Path, *, interval: float = 0.2) -> None:
    """Return once ``path`` exists."""
    while not path.exists():
        time.sleep(interval)
