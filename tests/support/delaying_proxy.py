"""A TCP proxy in front of a real redis-server that holds every reply back for a while.

It stands for a slow Redis as a client sees it: an overloaded server, a congested network or a
failover in progress. The server itself stays healthy, so the same test can show both a Redis
that is slow but answers within the request timeout and one that answers too late.
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
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

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
                if delayed and self.delay:
                    # The wait ends early when the proxy closes, so no test waits on it.
                    self._closed.wait(self.delay)
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
