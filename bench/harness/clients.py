"""Clients of the bench site: browsers that keep their cookies, the throttle cookie a browser
holds, and on raw asyncio sockets page views and live streams (Server-Sent Events)."""

from __future__ import annotations

import asyncio
import html
import http.client
import re
import time
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING, Final
from urllib.parse import urlencode

if TYPE_CHECKING:
    from bench.harness.servers import Node

BROWSER: Final = "Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0"
#: A state's guests, as the widget's HTML (escaped in the event's JSON) writes them.
GUESTS: Final = re.compile(rb'data-guests=\\"(\d+)\\"')
LIVE: Final = re.compile(r'data-whos-online-live="([^"]*)"')


def address(number: int, network: str = "10") -> str:
    """The ``number``-th IPv4 address of ``network`` (a first octet, or two)."""
    octets = 4 - network.count(".") - 1
    rest = [(number >> (8 * shift)) & 255 for shift in reversed(range(octets))]
    return ".".join([network, *map(str, rest)])


def get(port: int, path: str, headers: dict[str, str]) -> dict[str, str]:
    """GET ``path``, which must answer 200; the cookies the response set."""
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path, headers=headers)
        response = connection.getresponse()
        response.read()
        if response.status != 200:
            raise RuntimeError(f"GET {path} answered {response.status}")
        found: dict[str, str] = {}
        for header in response.headers.get_all("Set-Cookie") or []:
            found.update({name: morsel.value for name, morsel in SimpleCookie(header).items()})
        return found
    finally:
        connection.close()


@dataclass
class Browser:
    """A client behind the one trusted proxy (its address in ``X-Forwarded-For``)."""

    address: str
    cookies: dict[str, str] = field(default_factory=dict)

    def headers(self, extra_cookies: dict[str, str] | None = None) -> dict[str, str]:
        headers = {"X-Forwarded-For": self.address, "User-Agent": BROWSER}
        cookies = {**self.cookies, **(extra_cookies or {})}
        if cookies:
            headers["Cookie"] = "; ".join(f"{name}={value}" for name, value in cookies.items())
        return headers

    def visit(self, port: int, path: str = "/") -> None:
        """A page view that keeps the cookies it is given, as a browser does."""
        self.cookies |= get(port, path, self.headers())


def crowd(count: int, network: str = "198.18") -> list[Browser]:
    return [Browser(address(number + 1, network)) for number in range(count)]


class ThrottleCookies:
    """The throttle cookie of each of a crowd, as browsers hold it, fetched again before the
    first of them runs out: each is good all through the cell that sends it."""

    def __init__(self, browsers: list[Browser], node: Node) -> None:
        self.browsers = browsers
        self.node = node
        self.expiry = 0.0
        self.cookies: list[dict[str, str]] = []

    def get(self, port: int) -> list[dict[str, str]]:
        from bench.internals import COOKIE_NAME

        if time.time() + 15 < self.expiry:
            return self.cookies
        # Fetched again before they run out, they would come back unchanged (each process
        # remembers whom it recorded): once they have run out, the visits are recorded anew.
        time.sleep(max(self.expiry - time.time() + 0.5, 0.0))
        self.cookies = [{} for _ in self.browsers]
        # A worker that knows no epoch of its shard yet (before its first write) hands out a
        # cookie without one, which a later page renews: take cookies until none is renewed.
        for _pass in range(4):
            renewed = 0
            for browser, cookie in zip(self.browsers, self.cookies, strict=True):
                found = get(port, "/", browser.headers(cookie)).get(COOKIE_NAME)
                if found is not None and found != cookie.get(COOKIE_NAME):
                    cookie[COOKIE_NAME] = found
                    renewed += 1
            self.settle()
            if not renewed:
                break
        if not all(self.cookies):
            raise RuntimeError("the site handed out no throttle cookie")
        # A cookie begins with the Unix time at which it stops sparing a write (EXPIRY.MAC…).
        self.expiry = min(int(c[COOKIE_NAME].partition(".")[0]) for c in self.cookies)
        return self.cookies

    def settle(self, longest: float = 10.0) -> None:
        """Wait until Redis runs nothing but the INFO asking: the flushers wrote the visits
        that handed the cookies out, and a cell that sends them finds no command but its own."""
        deadline, count = time.monotonic() + longest, self.node.commands()
        while time.monotonic() < deadline:
            time.sleep(0.2)
            now = self.node.commands()
            if now == count + 1:
                return
            count = now


# Raw asyncio sockets: thousands of clients in one process.


async def page(port: int, path: str, client: str) -> tuple[int, str]:
    """A browser's page view of ``path`` from the address ``client``: the status and body."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        f"GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\nX-Forwarded-For: {client}\r\n"
        "Sec-Fetch-Dest: document\r\nSec-Fetch-Site: none\r\nAccept: text/html\r\n\r\n".encode()
    )
    answer = await reader.read()
    writer.close()
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body.decode()


async def stream_path(port: int, path: str = "/room/") -> str:
    """The URL of the stream of the live widget on ``path`` (seen once by a first guest)."""
    status, body = await page(port, path, "10.0.0.1")
    found = LIVE.search(body)
    if status != 200 or found is None:
        raise RuntimeError(f"{path} answered {status}, with no live widget")
    query = html.unescape(found[1]).partition("?")[2]
    return f"/online/stream/?{urlencode([('widget', query)])}"


class Stream:
    """One open live stream, read as a browser would: when each state came and the guests it
    counted, and when each ``stale`` came."""

    def __init__(self) -> None:
        self.states: list[tuple[float, int]] = []
        self.received: list[float] = []
        self.stales: list[float] = []
        self.first = asyncio.get_running_loop().create_future()
        self.task: asyncio.Task[None] | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def run(self, port: int, path: str) -> None:
        reader, self.writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
        # HTTP/1.0: the body is the event stream itself, not chunks.
        self.writer.write(f"GET {path} HTTP/1.0\r\nAccept: text/event-stream\r\n\r\n".encode())
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200")):
            raise RuntimeError(f"the stream answered {head[:40]!r}")
        # uvicorn's httptools answers an HTTP/1.0 request in chunks all the same.
        chunked = b"transfer-encoding: chunked" in head.lower()
        buffer = framed = b""
        while chunk := await reader.read(1 << 16):
            now = time.perf_counter()
            if chunked:
                chunk, framed = unchunked(framed + chunk)
            *blocks, buffer = (buffer + chunk).split(b"\n\n")
            for block in blocks:
                self._read(block, now)

    def _read(self, block: bytes, now: float) -> None:
        if block.startswith(b"event: stale"):
            self.stales.append(now)
        if not block.startswith((b"data:", b"retry:")):
            return
        self.received.append(now)
        found = GUESTS.search(block)
        if found is not None:
            self.states.append((now, int(found[1])))
            if not self.first.done():
                self.first.set_result(None)

    def arrived(self, guests: int, after: float) -> float | None:
        """When it received a state counting ``guests`` guests, sent after ``after``."""
        return next((at for at, count in self.states if at >= after and count == guests), None)

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
        if self.task is not None:
            self.task.cancel()


def unchunked(framed: bytes) -> tuple[bytes, bytes]:
    """The body that the whole chunks at the start of ``framed`` carry, and what follows them."""
    body = []
    while (end := framed.find(b"\r\n")) >= 0:
        size = int(framed[:end].split(b";")[0], 16)
        if len(framed) < end + 2 + size + 2:
            break
        body.append(framed[end + 2 : end + 2 + size])
        framed = framed[end + 2 + size + 2 :]
    return b"".join(body), framed


async def open_streams(port: int, path: str, count: int, batch: int = 200) -> list[Stream]:
    """``count`` streams of ``path``, ``batch`` at a time, each read until its first state."""
    from bench.harness.report import progress

    streams: list[Stream] = []
    for start in range(0, count, batch):
        more = [Stream() for _ in range(min(batch, count - start))]
        for stream in more:
            stream.task = asyncio.ensure_future(stream.run(port, path))
        await asyncio.wait_for(asyncio.gather(*(stream.first for stream in more)), 120)
        streams += more
        if len(streams) % 2000 == 0:
            progress(f"{len(streams)} streams open")
    return streams


async def closed(port: int, longest: float = 60.0) -> float:
    """Seconds until the server has closed every connection to ``port`` (at most ``longest``)."""
    from bench.harness.servers import connections

    started = time.perf_counter()
    while connections(port) and time.perf_counter() - started < longest:  # noqa: ASYNC110
        await asyncio.sleep(0.1)
    return time.perf_counter() - started
