"""A small upstream for the gateway tests: answers every request with what it received.

The JSON body names the method, the path and the request headers, so a test
sees what a gateway passed upstream (Traefik's ``authResponseHeaders``, say).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class Backend:
    """A threaded stdlib HTTP server on 127.0.0.1 that echoes requests as JSON."""

    def __init__(self, port: int = 0) -> None:
        self.server = _Server(("127.0.0.1", port), _Echo)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self._count = 0
        self._lock = threading.Lock()

    @property
    def served(self) -> int:
        """Requests answered so far (counted before the answer is sent)."""
        with self._lock:
            return self._count

    def count(self) -> None:
        """One more request served: under a lock, as the handler threads run at once."""
        with self._lock:
            self._count += 1

    def start(self) -> Backend:
        self.server.served_by = self  # type: ignore[attr-defined]
        threading.Thread(
            target=self.server.serve_forever,
            kwargs={"poll_interval": 0.05},
            daemon=True,
        ).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class _Server(ThreadingHTTPServer):
    #: The stdlib's listen backlog is 5: a gateway opening more connections at once
    #: would have SYNs dropped and wait 1 s for their retransmit (Envoy's and
    #: HAProxy's connect timeouts to the backend are 1 s).
    request_queue_size = 128

    def handle_error(self, request, client_address):
        """A gateway closing a kept-alive connection is no error worth a traceback."""


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length:
            self.rfile.read(length)
        self.server.served_by.count()  # type: ignore[attr-defined]
        body = json.dumps(
            {
                "method": self.command,
                "path": self.path,
                "headers": {k.lower(): v for k, v in self.headers.items()},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _answer

    def log_message(self, format, *args):
        pass
