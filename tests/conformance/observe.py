"""What Redis saw of a conformance step: the deciding scripts run (``MONITOR``), the keys left.

Every implementation is watched the same way (:mod:`.corpus`): the scripts it
ran on Redis, with their keys and arguments, normalized (a shard drawn at
random is ``:s*``, ``hot.lua``'s request id ``*``), and the keys Redis holds
after the step (an in-flight set with its size).
"""

from __future__ import annotations

import hashlib
import queue
import re
import socket
import threading
import time
from typing import Any

import redis

from sluice.bucket import SCRIPT
from sluice.scripts import CHARGE, HOT, RELEASE

#: script name by SHA-1, as MONITOR shows EVALSHA
SCRIPTS = {
    hashlib.sha1(source).hexdigest(): name
    for name, source in (
        ("token_bucket", SCRIPT),
        ("hot", HOT),
        ("release", RELEASE),
        ("charge", CHARGE),
    )
}
DECIDING_SCRIPTS = ("token_bucket", "hot")
_SHARD = re.compile(r":s\d+$")
#: a calendar quota's role flag and period bounds: the bounds are the day's or month's
#: the scenario runs in, so not golden (``q*``)
_QUOTA_BOUNDS = re.compile(r"^([0-3])q\d+:\d+:\d+$")


def normal_key(key: str) -> str:
    """A key with its shard suffix as ``:s*`` (the shard is drawn at random)."""
    return _SHARD.sub(":s*", key)


def script_call(args: list[str]) -> dict[str, Any] | None:
    """A deciding script call from a MONITOR command, normalized; None for others."""
    if not args or args[0].upper() not in ("EVALSHA", "EVAL"):
        return None
    sha = args[1] if args[0].upper() == "EVALSHA" else None
    if sha is None:
        sha = hashlib.sha1(args[1].encode("latin-1")).hexdigest()
    name = SCRIPTS.get(sha.lower(), "unknown")
    if name not in DECIDING_SCRIPTS and name != "unknown":
        return None
    count = int(args[2])
    keys = [normal_key(k) for k in args[3 : 3 + count]]
    return {"script": name, "keys": keys, "argv": normal_argv(name, args[3 + count :])}


def normal_argv(script: str, argv: list[str]) -> list[str]:
    """A deciding script's arguments without what differs from run to run: ``hot.lua``'s
    request id (random per gateway process) and a calendar quota's bounds, ``*``."""
    argv = [_QUOTA_BOUNDS.sub(r"\1q*", arg) for arg in argv]
    if script == "hot" and argv:
        argv[0] = "*"
    return argv


class Monitor:
    """``MONITOR`` on a Redis, in a thread: the commands it ran, split by markers."""

    def __init__(self, port: int) -> None:
        self.port = port
        self._lines: queue.Queue[list[str]] = queue.Queue()
        self._sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self._sock.sendall(b"MONITOR\r\n")
        self._file = self._sock.makefile("rb")
        if self._file.readline().strip() != b"+OK":
            raise RuntimeError("MONITOR refused")
        self._marker = redis.Redis(port=port)
        self._count = 0
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            for line in self._file:
                self._lines.put(_monitor_args(line.decode("latin-1")))
        except (OSError, ValueError):
            return

    def commands(self, timeout: float = 30.0) -> list[list[str]]:
        """Every command run since the previous call (a marker closes the span)."""
        self._count += 1
        marker = f"sluice-conformance-{self._count}"
        self._marker.echo(marker)
        found: list[list[str]] = []
        deadline = time.monotonic() + timeout
        while True:
            args = self._lines.get(timeout=max(0.01, deadline - time.monotonic()))
            if args[:2] == ["ECHO", marker] or args[:2] == ["echo", marker]:
                return found
            found.append(args)

    def calls(self) -> list[dict[str, Any]]:
        """The deciding script calls since the previous call, NOSCRIPT retries once."""
        calls: list[dict[str, Any]] = []
        for args in self.commands():
            call = script_call(args)
            if call is not None and (not calls or calls[-1] != call):
                calls.append(call)
        return calls

    def close(self) -> None:
        self._sock.close()
        self._marker.close()


_ARG = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _monitor_args(line: str) -> list[str]:
    """``+1700000000.1 [0 127.0.0.1:5] "EVALSHA" "ab" ...`` -> ``["EVALSHA", "ab", ...]``."""
    return [_unescape(m) for m in _ARG.findall(line)]


def _unescape(text: str) -> str:
    out, index = [], 0
    while index < len(text):
        char = text[index]
        if char != "\\":
            out.append(char)
            index += 1
            continue
        nxt = text[index + 1]
        if nxt == "x":
            out.append(chr(int(text[index + 2 : index + 4], 16)))
            index += 4
            continue
        out.append(
            {"n": "\n", "r": "\r", "t": "\t", "a": "\a", "b": "\b"}.get(nxt, nxt)
        )
        index += 2
    return "".join(out)


def store(client: redis.Redis) -> list[str]:
    """The keys Redis holds, sorted; an in-flight set with ``#`` and its size."""
    found = []
    for raw in client.keys("*"):
        key = raw.decode("latin-1")
        if client.type(raw) == b"zset":
            key += f"#{client.zcard(raw)}"
        found.append(normal_key(key))
    return sorted(found)


def wait_store(
    client: redis.Redis, expected: list[str], timeout: float = 10.0
) -> list[str]:
    """The store once it equals ``expected`` (background work may still be landing),
    or as it is after ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        found = store(client)
        if found == expected or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def reset(client: redis.Redis, scenario: dict[str, Any]) -> None:
    """An empty Redis with no script loaded, then the scenario's seed."""
    client.flushdb()
    client.script_flush()
    for command in scenario.get("seed", ()):
        client.execute_command(*command)
