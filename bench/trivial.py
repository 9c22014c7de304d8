"""Servers of the decision service's own stacks that decide nothing: the benches' floor.

``grpc``: a ``grpc.aio`` server whose ``ShouldRateLimit`` answers ``OK`` at
once (no Redis, no rules); ``http``: uvicorn (httptools) serving an ASGI app
that answers ``200`` with an empty body to every request. Both are configured
as ``sluice-decide`` configures its own (``sluice.service.main``), so the gap
between them and the service is the service's work, not the framework's::

    python -m bench.trivial grpc 127.0.0.1:9001
    python -m bench.trivial http 127.0.0.1:9002
"""

from __future__ import annotations

import asyncio
import sys
from typing import Any


async def serve_grpc(host: str, port: int) -> None:
    """RLS that says OK to everything, until killed."""
    import grpc
    from envoy.service.ratelimit.v3 import rls_pb2, rls_pb2_grpc

    class Ok(rls_pb2_grpc.RateLimitServiceServicer):
        async def ShouldRateLimit(self, request: Any, context: Any) -> Any:
            return rls_pb2.RateLimitResponse(overall_code=rls_pb2.RateLimitResponse.OK)

    server = grpc.aio.server(options=[("grpc.so_reuseport", 0)])
    rls_pb2_grpc.add_RateLimitServiceServicer_to_server(Ok(), server)
    server.add_insecure_port(f"{host}:{port}")
    await server.start()
    await server.wait_for_termination()


async def ok(scope: Any, receive: Any, send: Any) -> None:
    """ASGI: 200, empty body, to every HTTP request."""
    if scope["type"] != "http":
        return
    headers = [(b"content-length", b"0")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b""})


def serve_http(host: str, port: int) -> None:
    """uvicorn with the service's settings, serving :func:`ok`, until killed."""
    import uvicorn

    uvicorn.run(
        ok,
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="off",
        server_header=False,
        date_header=False,
    )


def main() -> None:
    kind, address = sys.argv[1], sys.argv[2]
    host, _, port = address.rpartition(":")
    if kind == "grpc":
        asyncio.run(serve_grpc(host, int(port)))
    elif kind == "http":
        serve_http(host, int(port))
    else:
        raise SystemExit(
            f"usage: python -m bench.trivial grpc|http HOST:PORT, not {kind}"
        )


if __name__ == "__main__":
    main()
