"""Load through a gateway from keep-alive HTTP/1.1 connections: for the tests'
overload runs and the benchmarks (``bench/``), which count what was answered."""

from __future__ import annotations

import asyncio
import time
from collections import Counter


class HttpConnection:
    """One keep-alive HTTP/1.1 connection sending GETs (a cheap load generator)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def get(self, path: str, headers: dict[str, str]) -> int:
        """The status of one GET of ``path`` (the body is read and dropped)."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(
                "127.0.0.1", self.port
            )
        assert self.reader is not None
        lines = [f"GET {path} HTTP/1.1", "Host: sluice-test"]
        lines += [f"{k}: {v}" for k, v in headers.items()]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        status_line = await self.reader.readline()
        length = 0
        closing = False
        while (line := await self.reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"connection" and value.strip().lower() == b"close":
                closing = True
        if length:
            await self.reader.readexactly(length)
        if closing:
            self.close()
        return int(status_line.split()[1])

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = self.reader = None


async def hammer(
    port: int, *, connections: int, seconds: float, path: str, headers: dict[str, str]
) -> Counter[int]:
    """GET ``path`` back to back from ``connections`` connections for ``seconds``:
    how many answers of each status (a closed loop: as many requests in flight as
    connections, however slow the answers)."""
    statuses: Counter[int] = Counter()
    stop = time.monotonic() + seconds

    async def caller() -> None:
        connection = HttpConnection(port)
        try:
            while time.monotonic() < stop:
                statuses[await connection.get(path, headers)] += 1
        finally:
            connection.close()

    await asyncio.gather(*(caller() for _ in range(connections)))
    return statuses
