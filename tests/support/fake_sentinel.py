"""A stand-in Sentinel that speaks just enough RESP for the listener tests, and says what it is
told to: the replicas it knows, and any message, well-formed or not, on its pub/sub channels.

A real Sentinel publishes only its own events, and only as text; testing what the listener does
with a Sentinel that announces an address nobody knows, or with bytes that are not UTF-8 or an
integer where text belongs, needs one that can be made to misbehave.
"""

from __future__ import annotations

import contextlib
import socketserver
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import io
    import socket
    from collections.abc import Iterator

Address = tuple[str, int]


def _bulk(value: bytes | str | int) -> bytes:
    if isinstance(value, int):
        return b":%d\r\n" % value
    raw = value.encode() if isinstance(value, str) else value
    return b"$%d\r\n%s\r\n" % (len(raw), raw)


def _array(items: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(items) + b"".join(items)


def _pairs(fields: dict[str, str | int], *, resp3: bool) -> bytes:
    """A Sentinel's state of an instance: a map in RESP3, a flat array of pairs in RESP2."""
    parts = [_bulk(part) for key, value in fields.items() for part in (key, str(value))]
    if resp3:
        return b"%%%d\r\n" % len(fields) + b"".join(parts)
    return _array(parts)


def _read_command(stream: io.BufferedIOBase) -> list[bytes] | None:
    """One command of a client (an array of bulk strings), or None when it hung up."""
    header = stream.readline()
    if not header:
        return None
    if not header.startswith(b"*"):
        return header.split()
    arguments = []
    for _ in range(int(header[1:])):
        length = int(stream.readline()[1:])
        arguments.append(stream.read(length + 2)[:-2])
    return arguments


class FakeSentinel(socketserver.ThreadingTCPServer):
    """Knows one service: its master at ``master`` and the replicas in ``replicas``.

    ``answering = False`` makes it refuse every SENTINEL command, as a Sentinel that cannot be
    asked; subscriptions go on. ``publish`` sends a message to every subscriber as it is given.
    """

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, service_name: str, master: Address, replicas: list[Address]) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.service_name = service_name
        self.master = master
        self.replicas = list(replicas)
        self.answering = True
        #: Each subscribed connection, and whether it speaks RESP3.
        self.subscribers: list[tuple[socket.socket, bool]] = []
        self.subscribed = threading.Condition()
        self._thread = threading.Thread(
            target=self.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True
        )

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def __enter__(self) -> FakeSentinel:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.shutdown()
        self.server_close()
        for subscriber, _resp3 in self.subscribers:
            with contextlib.suppress(OSError):
                subscriber.close()

    def wait_for_subscriber(self, timeout: float) -> None:
        with self.subscribed:
            if not self.subscribed.wait_for(lambda: self.subscribers, timeout):
                raise AssertionError("nobody subscribed to the fake Sentinel")

    def publish(self, channel: bytes | str, data: bytes | str | int) -> None:
        """Send a message to every subscriber, as a push (RESP3) or an array (RESP2)."""
        parts = [_bulk("message"), _bulk(channel), _bulk(data)]
        for subscriber, resp3 in list(self.subscribers):
            subscriber.sendall(b">3\r\n" + b"".join(parts) if resp3 else _array(parts))

    def answer(self, arguments: list[bytes], *, resp3: bool) -> bytes:
        """The reply to a command other than SUBSCRIBE."""
        name = [part.decode(errors="replace").upper() for part in arguments[:2]]
        if name[:1] == ["HELLO"]:
            return b"%2\r\n" + _bulk("proto") + _bulk(3) + _bulk("mode") + _bulk("sentinel")
        if name[:1] != ["SENTINEL"]:
            return b"+OK\r\n" if name[:1] != ["PING"] else b"+PONG\r\n"
        if not self.answering:
            return b"-ERR this Sentinel answers nothing\r\n"
        subcommand = name[1] if len(name) > 1 else ""
        if subcommand in {"SLAVES", "REPLICAS"} and arguments[2:3] != [self.service_name.encode()]:
            return b"-ERR No such master with that name\r\n"
        replies = {
            "MASTERS": lambda: _array(
                [self._state(self.master, "master", resp3, name=self.service_name)]
            ),
            "SLAVES": lambda: _array([self._state(r, "slave", resp3) for r in self.replicas]),
            "GET-MASTER-ADDR-BY-NAME": lambda: _array(
                [_bulk(self.master[0]), _bulk(str(self.master[1]))]
            ),
        }
        reply = replies.get("SLAVES" if subcommand == "REPLICAS" else subcommand)
        return b"-ERR unknown subcommand\r\n" if reply is None else reply()

    def _state(self, address: Address, flags: str, resp3: bool, name: str = "") -> bytes:
        fields: dict[str, str | int] = {
            "name": name or f"{address[0]}:{address[1]}",
            "ip": address[0],
            "port": address[1],
            "flags": flags,
            "num-other-sentinels": 0,
            "quorum": 1,
        }
        return _pairs(fields, resp3=resp3)


class _Handler(socketserver.StreamRequestHandler):
    server: FakeSentinel

    def handle(self) -> None:
        resp3 = False  # until the client says HELLO 3, as redis-py 8 does
        for arguments in self._commands():
            command = arguments[0].upper() if arguments else b""
            if command == b"HELLO":
                resp3 = arguments[1:2] == [b"3"]
            if command == b"SUBSCRIBE":
                for count, channel in enumerate(arguments[1:], start=1):
                    parts = [_bulk("subscribe"), _bulk(channel), _bulk(count)]
                    self.request.sendall(b">3\r\n" + b"".join(parts) if resp3 else _array(parts))
                with self.server.subscribed:
                    self.server.subscribers.append((self.request, resp3))
                    self.server.subscribed.notify_all()
            else:
                self.request.sendall(self.server.answer(arguments, resp3=resp3))

    def _commands(self) -> Iterator[list[bytes]]:
        while True:
            try:
                arguments = _read_command(self.rfile)
            except (OSError, ValueError):
                return
            if arguments is None:
                return
            yield arguments
