"""The demo backends alone, without the middleware: the upstream of the demo Envoy.

``python -m gateway.backends`` serves :func:`gateway.demo.backends` on
``SLUICE_BACKENDS_HOST``:``SLUICE_BACKENDS_PORT`` (127.0.0.1:8090, the
upstream of ``docs/gateways/envoy.yaml``). ``make run`` starts it with Envoy
and the decision service, so the same sample services are reached through
the Python demo gateway (8080) and through Envoy (10000).
"""

from __future__ import annotations

import logging
import os
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from gateway.demo import backends

__all__ = ["main"]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    host = os.environ.get("SLUICE_BACKENDS_HOST", "127.0.0.1")
    port = int(os.environ.get("SLUICE_BACKENDS_PORT", "8090"))
    server = make_server(host, port, backends, _ThreadingServer, _Quiet)
    print(f"Sluice demo backends (no limiter) on http://{host}:{port}")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()
