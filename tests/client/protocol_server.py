"""A small control plane for tests: the snapshot endpoint of docs/gateway-protocol.md.

It signs what it serves with the tests' key (``tests/signing.py``), as the real
one does, unless a test serves bytes with a signature of its own (or none).

Stdlib ``http.server`` on 127.0.0.1, in a thread. The real endpoint lives in
``api/``; this one lets the client be tested against the written protocol.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sluice import Bundle, protocol
from sluice.signing import sign
from tests.signing import TEST_SIGNING_KEY


@dataclass
class ProtocolServer:
    """Serves one bundle with an ETag; records every request's headers."""

    token: str = "gw_test_token"
    body: bytes = b""
    etag: str = ""
    signature: str | None = None  #: the Sluice-Signature header; None: not sent
    fail_with: int | None = None  #: answer this status instead (e.g. 500)
    requests: list[dict[str, str]] = field(default_factory=list)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/api/v1/snapshot"

    def serve(self, bundle: Bundle) -> None:
        """Serve ``bundle`` from now on (as the control plane does after a publish)."""
        self.serve_bytes(json.dumps(bundle.to_json(), sort_keys=True).encode())

    def serve_bytes(self, body: bytes, *, signature: str | bool | None = True) -> None:
        """Serve ``body``, signed by the tests' key (``signature=True``), with a
        given signature header, or with none (``None``)."""
        if signature is True:
            signature = sign(TEST_SIGNING_KEY, body)
        self.body = body
        self.signature = signature or None
        self.etag = '"' + hashlib.sha256(body).hexdigest() + '"'

    def start(self) -> ProtocolServer:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        server.daemon_threads = True
        self._server = server
        threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def _handler(state: ProtocolServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests.append(dict(self.headers.items()))
            if self.path != "/api/v1/snapshot":
                return self._send(404, b'{"error": "not found"}')
            if self.headers.get("Authorization") != f"Bearer {state.token}":
                return self._send(
                    401, b'{"error": "unauthorized", "detail": "bad token"}'
                )
            if state.fail_with is not None:
                return self._send(state.fail_with, b'{"error": "failing on purpose"}')
            if self.headers.get("If-None-Match") == state.etag:
                return self._send(304, b"", etag=state.etag)
            body, encoding = state.body, None
            if "gzip" in self.headers.get("Accept-Encoding", ""):
                body, encoding = gzip.compress(body), "gzip"
            return self._send(
                200, body, etag=state.etag, encoding=encoding, signature=state.signature
            )

        def _send(
            self, status, body, *, etag=None, encoding=None, signature=None
        ) -> None:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            if signature:
                self.send_header(protocol.SIGNATURE, signature)
            if etag:
                self.send_header("ETag", etag)
            if encoding:
                self.send_header("Content-Encoding", encoding)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if body:
                self.wfile.write(body)

        def log_message(self, format, *args) -> None:  # keep test output clean
            pass

    return Handler
