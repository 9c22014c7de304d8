"""A loopback TCP relay in front of a Redis whose replies can be held back.

Holding the replies is a call that Redis ran but whose answer comes late: what
a loaded Redis or a congested link does to a client with a short timeout. The
client gives up, although the command took effect. Replies are held until
:meth:`SlowLink.lift`, not for a time: a call made while they are held times
out however long this machine takes to make it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from dataclasses import dataclass, field

from tests.servers import free_port


@dataclass
class SlowLink:
    """Relays 127.0.0.1:``port`` to ``target_port``; :meth:`hold` delays replies."""

    target_port: int
    port: int = field(default_factory=free_port)
    _flowing: threading.Event = field(default_factory=threading.Event)
    _listener: socket.socket | None = None
    _stop: threading.Event = field(default_factory=threading.Event)

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> SlowLink:
        self._flowing.set()
        listener = socket.create_server(("127.0.0.1", self.port))
        listener.settimeout(0.1)
        self._listener = listener
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def hold(self) -> None:
        """Replies that arrive from Redis from now on wait until :meth:`lift`."""
        self._flowing.clear()

    def lift(self) -> None:
        """Let the held replies and the next ones through."""
        self._flowing.set()

    def stop(self) -> None:
        self._stop.set()
        self._flowing.set()
        if self._listener is not None:
            self._listener.close()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except (TimeoutError, OSError):
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target_port))
            threading.Thread(
                target=self._pipe, args=(client, upstream, False), daemon=True
            ).start()
            threading.Thread(
                target=self._pipe, args=(upstream, client, True), daemon=True
            ).start()

    def _pipe(self, source: socket.socket, sink: socket.socket, replies: bool) -> None:
        try:
            while data := source.recv(65536):
                if replies:
                    self._flowing.wait()
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for end in (source, sink):
                with contextlib.suppress(OSError):
                    end.shutdown(socket.SHUT_RDWR)
                end.close()
