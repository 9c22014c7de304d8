"""What every private server shares: its address, its process and how it fails."""

from __future__ import annotations

import ipaddress
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

#: Seconds a server has to answer after it was started, and to stop once asked.
START_TIMEOUT = 60.0
STOP_TIMEOUT = 4.0  # honcho sends SIGKILL 5 s after its SIGTERM


class StartFailed(Exception):
    """A private server did not start; the message is the one line to print."""


@dataclass(frozen=True)
class Address:
    """A TCP host and port taken from a service URL."""

    host: str
    port: int

    def answers(self, timeout: float = 1.0) -> bool:
        """True when something accepts a TCP connection here."""
        try:
            with socket.create_connection((self.host, self.port), timeout=timeout):
                return True
        except OSError:
            return False

    def is_local(self) -> bool:
        """True when every address the host resolves to is a loopback address."""
        return bool(self.bind_addresses())

    def bind_addresses(self) -> list[str]:
        """The numeric loopback addresses of the host; empty if any of them is not loopback."""
        try:
            infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except OSError:
            return []
        found = sorted({str(info[4][0]) for info in infos})
        if not all(ipaddress.ip_address(ip).is_loopback for ip in found):
            return []
        return found

    def __str__(self) -> str:
        if ":" in self.host:
            return f"[{self.host}]:{self.port}"
        return f"{self.host}:{self.port}"


class PrivateServer(Protocol):
    """A server the launcher starts, watches and stops."""

    name: str  #: "Postgres" or "Redis"
    url: str  #: the configured URL it serves

    def start(self) -> None:
        """Start the server process (StartFailed when it cannot be started)."""

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Return once it answers (StartFailed when it ends or time runs out)."""

    def exited(self) -> int | None:
        """Its exit status once it has ended; None while it runs."""

    def stop(self) -> None:
        """Stop it and wait until it has; a no-op when it is not running."""


@dataclass
class ServerProcess:
    """A server process that logs to a file and is stopped by a signal of its choice.

    It stays in this process's group, so honcho's SIGKILL of the group (5 s after its
    SIGTERM) reaches it even if this process is stuck.
    """

    log: Path
    stop_signal: signal.Signals = signal.SIGTERM
    process: subprocess.Popen[bytes] | None = None
    _log_start: int = 0  # where this run's lines begin in the log

    def spawn(self, command: Sequence[str], **options: Any) -> None:
        """Start ``command`` (Popen ``options``), its output appended to the log."""
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab") as out:
            self._log_start = out.tell()
            self.process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                **options,
            )

    def exited(self) -> int | None:
        """The exit status once the process has ended; None while it runs."""
        return None if self.process is None else self.process.poll()

    def stop(self) -> None:
        """Send the stop signal, then SIGKILL if it has not ended within STOP_TIMEOUT."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(self.stop_signal)
        try:
            self.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)

    def reason(self, pattern: str = "") -> str:
        """Why the process ended, from what it logged since it was spawned.

        From the last line that matches the regular expression ``pattern`` (from the
        match on), else the last line; an empty string when it logged nothing.
        """
        try:
            with self.log.open("rb") as log:
                log.seek(self._log_start)
                lines = log.read().decode(errors="replace").strip().splitlines()
        except OSError:
            return ""
        for line in reversed(lines if pattern else []):
            if found := re.search(pattern, line):
                return line[found.start() :].strip()
        return lines[-1].strip() if lines else ""


def polls(timeout: float, interval: float = 0.1) -> Iterator[None]:
    """Yield until ``timeout`` seconds have passed, sleeping ``interval`` between yields."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        yield
        time.sleep(interval)
