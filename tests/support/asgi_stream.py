"""Django's ASGI handler driven by hand, for a response that never ends: the live stream.

Django's ``AsyncClient`` reads a response to its end; a stream ends only when the page goes. This
calls the ASGI application with a scope of its own and reads what it sends as it comes, one
server-sent event at a time, then says the client is gone (``http.disconnect``). A client that
stops reading is a ``send`` that does not return until it reads again (``stop_reading``), as a
server's does once its buffer is full. ``SERVED_BY`` names the application: Django's own, or the
same in ``whos_online.asgi.LiveStreams`` (a test's fixture chooses).
"""

from __future__ import annotations

import asyncio
import json
from http.cookies import SimpleCookie
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from django.core.handlers.asgi import ASGIHandler

from whos_online.asgi import LiveStreams

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping


#: The applications a stream may be served by, by name.
APPLICATIONS: dict[str, Callable[[], Any]] = {
    "django": ASGIHandler,
    "live_streams": lambda: LiveStreams(ASGIHandler()),
}
SERVED_BY = "django"


class Stream:
    """One request through the ASGI stack, its status, headers and events as they come."""

    def __init__(
        self,
        url: str,
        *,
        cookies: dict[str, str] | None = None,
        method: str = "GET",
        client: str = "203.0.113.7",
    ) -> None:
        parts = urlsplit(url)
        headers = [(b"host", b"testserver"), (b"accept", b"text/event-stream")]
        if cookies:
            jar = SimpleCookie(cookies)
            headers.append(
                (b"cookie", "; ".join(f"{k}={v.value}" for k, v in jar.items()).encode())
            )
        self.scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": method,
            "scheme": "http",
            "path": parts.path,
            "raw_path": parts.path.encode(),
            "query_string": parts.query.encode(),
            "root_path": "",
            "headers": headers,
            "client": (client, 50000),
            "server": ("testserver", 80),
        }
        self.status = 0
        self.headers: dict[str, str] = {}
        self._inbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._outbox: asyncio.Queue[Mapping[str, Any]] = asyncio.Queue()
        self._buffer = ""
        self.ended = False
        self._task: asyncio.Task[None] | None = None
        self._reading = asyncio.Event()
        self._reading.set()
        #: Messages whose ``send`` is waiting for the client to read again.
        self.waiting = 0

    async def open(self, timeout: float = 30) -> Stream:
        await self._inbox.put({"type": "http.request", "body": b"", "more_body": False})
        self._task = asyncio.ensure_future(
            APPLICATIONS[SERVED_BY]()(self.scope, self._inbox.get, self._send)
        )
        getting = asyncio.ensure_future(self._outbox.get())
        await asyncio.wait(
            [getting, self._task], timeout=timeout, return_when=asyncio.FIRST_COMPLETED
        )
        if not getting.done():
            getting.cancel()
            if self._task.done():
                self._task.result()  # what the application raised
            raise asyncio.TimeoutError
        start = getting.result()
        assert start["type"] == "http.response.start"
        self.status = start["status"]
        self.headers = {k.decode().lower(): v.decode() for k, v in start["headers"]}
        return self

    async def _send(self, message: Mapping[str, Any]) -> None:
        if not self._reading.is_set():
            self.waiting += 1
            try:
                await self._reading.wait()
            finally:
                self.waiting -= 1
        await self._outbox.put(message)

    def stop_reading(self) -> None:
        """From the next message on, the server's ``send`` waits until ``read_again``."""
        self._reading.clear()

    def read_again(self) -> None:
        self._reading.set()

    @property
    def handled(self) -> bool:
        """Whether the ASGI application has returned."""
        return self._task is not None and self._task.done()

    async def sending(self, timeout: float = 10) -> None:
        """Until a message waits for the client to read again."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not self.waiting:
            assert loop.time() < deadline, "nothing was sent"
            await asyncio.sleep(0.01)

    async def handled_within(self, timeout: float = 10) -> bool:
        """Whether the ASGI application returns within ``timeout`` seconds."""
        assert self._task is not None
        done, _ = await asyncio.wait([self._task], timeout=timeout)
        return bool(done)

    async def event(self, timeout: float = 10) -> tuple[str, str]:
        """The next event, as (its name, its data): ("message", …) for a state, ("", "") for
        the end of the stream. Comments are skipped."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            while "\n\n" in self._buffer:
                block, self._buffer = self._buffer.split("\n\n", 1)
                name, data = "message", []
                for line in block.split("\n"):
                    field, _, value = line.partition(":")
                    value = value.removeprefix(" ")
                    if field == "event":
                        name = value
                    elif field == "data":
                        data.append(value)
                if data:
                    return name, "\n".join(data)
            if self.ended:
                return "", ""
            message = await asyncio.wait_for(self._outbox.get(), deadline - loop.time())
            self._buffer += message.get("body", b"").decode()
            self.ended = not message.get("more_body", False)

    async def state(self, timeout: float = 10) -> list[dict[str, Any]]:
        """The next state the stream sends (its widgets' answers), skipping other events."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            name, data = await self.event(deadline - loop.time())
            if name == "message":
                found: list[dict[str, Any]] = json.loads(data)["widgets"]
                return found
            assert name, "the stream ended"

    async def body(self, timeout: float = 10) -> bytes:
        """The whole body of a response that ends (a 204, a 400)."""
        chunks = []
        while not self.ended:
            message = await asyncio.wait_for(self._outbox.get(), timeout)
            chunks.append(message.get("body", b""))
            self.ended = not message.get("more_body", False)
        return b"".join(chunks)

    async def close(self) -> None:
        """The client goes; until the application has returned. What it raised is raised here,
        but for its cancellation: a stream whos_online cancelled ends so under Django 6.1, which
        sends a response from the application's own task."""
        await self._inbox.put({"type": "http.disconnect"})
        if self._task is None:
            return
        done, _ = await asyncio.wait([self._task], timeout=10)
        if not done:
            raise asyncio.TimeoutError
        if not self._task.cancelled():
            self._task.result()

    @property
    def task(self) -> asyncio.Task[None] | None:
        """The task that runs the application for this request."""
        return self._task
