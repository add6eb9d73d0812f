"""A TCP proxy in front of a real redis-server that holds every reply back for a while, or only
the next few.

It stands for a slow Redis as a client sees it: an overloaded server, a congested network or a
failover in progress, or one reply late under a burst of load. The server itself stays healthy,
so the same test can show both a Redis that is slow but answers within the request timeout and
one that answers too late. Only replies are held: Redis has run each command as it came.
"""

from __future__ import annotations

import contextlib
import socket
import threading

from tests.support.redis_server import free_port

#: Bytes read at a time from either side.
CHUNK = 65536


class DelayingProxy:
    """Forwards 127.0.0.1:<port> to a Redis port, delaying replies by ``delay`` seconds."""

    def __init__(self, target_port: int, delay: float = 0.0) -> None:
        self.target_port = target_port
        self.delay = delay
        self.port = free_port()
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._closed = threading.Event()
        #: How many of the next replies to hold back, and for how long each.
        self._held = 0
        self._held_for = 0.0
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def hold_replies(self, count: int, seconds: float) -> None:
        """Hold back the next ``count`` replies (on any connection) by ``seconds`` each, instead
        of ``delay``; the ones after go as before."""
        with self._lock:
            self._held, self._held_for = count, seconds

    def _wait_for(self) -> float:
        """How long to hold the reply that has just come from Redis."""
        with self._lock:
            if self._held:
                self._held -= 1
                return self._held_for
        return self.delay

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                downstream, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=5)
            except OSError:
                downstream.close()
                continue
            upstream.settimeout(None)
            with self._lock:
                self._sockets += [downstream, upstream]
            threading.Thread(
                target=self._pump, args=(downstream, upstream, False), daemon=True
            ).start()
            threading.Thread(
                target=self._pump, args=(upstream, downstream, True), daemon=True
            ).start()

    def _pump(self, source: socket.socket, sink: socket.socket, delayed: bool) -> None:
        with contextlib.suppress(OSError):
            while chunk := source.recv(CHUNK):
                wait = self._wait_for() if delayed else 0.0
                if wait:
                    # The wait ends early when the proxy closes, so no test waits on it.
                    self._closed.wait(wait)
                sink.sendall(chunk)
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        with self._lock:
            sockets, self._sockets = self._sockets, []
        for each in sockets:
            with contextlib.suppress(OSError):
                each.shutdown(socket.SHUT_RDWR)
            each.close()
