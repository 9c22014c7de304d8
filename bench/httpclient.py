"""A minimal asyncio HTTP/1.1 client for the polling bench.

One connection per request, like ``urllib`` in ``SnapshotSource`` (and gunicorn's
sync workers close the connection after each response anyway). Hand-written so
the load generator spends as little of the machine's two CPUs as possible.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from bench.common import percentile


@dataclass(frozen=True, slots=True)
class Reply:
    status: int  #: 0 when the request failed before a status line
    etag: str | None
    size: int  #: body bytes received
    seconds: float


async def get(
    port: int, path: str, headers: dict[str, str], *, timeout: float = 10.0
) -> Reply:
    """GET ``path`` on 127.0.0.1:``port``; never raises (status 0 on failure)."""
    began = time.perf_counter()
    lines = [f"GET {path} HTTP/1.1", "Host: 127.0.0.1", "Connection: close"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    writer = None
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port), timeout
        )
        writer.write(request)
        raw = await asyncio.wait_for(
            reader.read(-1), timeout
        )  # until the server closes
    except (OSError, TimeoutError):
        return Reply(0, None, 0, time.perf_counter() - began)
    finally:
        if writer is not None:
            writer.close()
    return _parse(raw, time.perf_counter() - began)


def _parse(raw: bytes, seconds: float) -> Reply:
    head, _, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    try:
        status = int(lines[0].split()[1])
    except (IndexError, ValueError):
        return Reply(0, None, 0, seconds)
    etag = None
    for line in lines[1:]:
        name, _, value = line.partition(":")
        if name.lower() == "etag":
            etag = value.strip()
    return Reply(status, etag, len(body), seconds)


@dataclass
class Block:
    """The replies of one block and how long it took."""

    replies: list[Reply]
    seconds: float

    @property
    def per_s(self) -> float:
        return len(self.replies) / self.seconds

    def latency_ms(self, q: float) -> float:
        ordered = sorted(r.seconds for r in self.replies)
        return percentile(ordered, q) * 1000

    @property
    def errors(self) -> int:
        return sum(1 for r in self.replies if r.status not in (200, 304))


def poll_headers(token: str, gateway: str, etag: str | None = None) -> dict[str, str]:
    """What ``SnapshotSource`` sends (docs/gateway-protocol.md)."""
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept-Encoding": "gzip",
        "Sluice-Gateway-Id": gateway,
    }
    if etag is not None:
        headers |= {"If-None-Match": etag, "Sluice-Applied-Version": "1"}
    return headers
