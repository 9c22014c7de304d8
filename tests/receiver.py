"""A customer's webhook endpoint for tests: a real HTTP server on 127.0.0.1.

It answers each POST with the next status of a script (then 200), and keeps
every request it got. This is the only stand-in of the suite: the customer's
service is outside the product.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from django.utils.datastructures import CaseInsensitiveMapping

#: Seconds an answer is held at most: past any test's own timeout (pytest-timeout's 300).
HOLD_TIMEOUT = 300


@dataclass
class Received:
    headers: CaseInsensitiveMapping  #: as HTTP has them: any case finds a header
    body: bytes


@dataclass
class Receiver:
    """The server, its script of answers, and what it received."""

    statuses: list[int] = field(default_factory=list)
    requests: list[Received] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None
    #: when set by a test, each answer waits until the event is set (at most
    #: HOLD_TIMEOUT, so that a test that fails does not leave the server hanging)
    hold: threading.Event | None = None
    arrived: threading.Event = field(default_factory=threading.Event)

    def wait_for_request(self, timeout: float = 120) -> None:
        if not self.arrived.wait(timeout):
            raise TimeoutError("no request arrived")

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_port}/hooks/sluice"

    def start(self) -> Receiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                receiver.requests.append(
                    Received(CaseInsensitiveMapping(dict(self.headers)), body)
                )
                receiver.arrived.set()
                if receiver.hold is not None:
                    receiver.hold.wait(HOLD_TIMEOUT)
                code = receiver.statuses.pop(0) if receiver.statuses else 200
                self.send_response(code)
                self.end_headers()
                self.wfile.write(b"thanks" if code < 300 else b"try again")

            def log_message(self, *args) -> None:  # keep test output clean
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver().start()
    yield server
    server.stop()
