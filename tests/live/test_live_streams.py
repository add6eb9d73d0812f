"""``whos_online.asgi.LiveStreams`` leaves alone what is not a live stream: another path, another
kind of scope, a stream Django answered without opening it (204, 400), and one a middleware
compressed, which Django carries. The streams it serves are tests/test_stream*.py's (served both
ways)."""

from __future__ import annotations

import asyncio
import threading
import weakref
import zlib
from typing import Any

import pytest

from tests.support import asgi_stream
from tests.support.asgi_stream import Stream
from tests.support.helpers import configure
from tests.test_stream import room_widget, run, stream_url
from tests.test_stream_bounds import only_listener
from whos_online.asgi import LiveStreams
from whos_online.live import line, streaming, subscription
from whos_online.live.line import OPENING
from whos_online.live.outbox import Outbox
from whos_online.live.resources import Freezer


class Recorder:
    """An application that records what it was called with, and answers 200."""

    def __init__(self) -> None:
        self.scopes: list[dict[str, Any]] = []

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        self.scopes.append(scope)
        if scope["type"] == "http":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await send({"type": "http.response.body", "body": b"ok"})


async def call(application: Any, scope: dict[str, Any]) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await application(scope, receive, send)
    return sent


def http(path: str) -> dict[str, Any]:
    return {"type": "http", "path": path, "method": "GET", "headers": [], "query_string": b""}


def test_other_requests_and_scopes_reach_the_application_as_they_came(db):
    inner = Recorder()
    wrapped = LiveStreams(inner)
    scopes = [http("/"), http("/online/widgets/"), {"type": "websocket", "path": "/ws/"}]
    sent = [asyncio.run(call(wrapped, scope)) for scope in scopes]

    assert inner.scopes == scopes  # the very same objects, nothing added
    assert all(seen is scope for seen, scope in zip(inner.scopes, scopes, strict=True))
    assert sent[0] == sent[1] == asyncio.run(call(Recorder(), http("/")))


def test_a_stream_django_answers_without_opening_it_is_sent_as_it_is(db):
    inner = Recorder()
    sent = asyncio.run(call(LiveStreams(inner), http("/online/stream/")))

    assert OPENING in inner.scopes[0]
    assert sent[-1] == {"type": "http.response.body", "body": b"ok"}  # the end, kept


@pytest.mark.parametrize("ending", ["its client goes", "the process stops"])
def test_a_stream_that_ended_drops_its_request_s_attributes_once_no_read_renders_it(
    backend, settings, db, monkeypatch, ending
):
    """Its request's attributes hold cycles (AuthenticationMiddleware's lazy user refers back
    to the request): dropped, what the stream held is freed as it ends, by reference counting,
    rather than at the collector's next full pass, from which ``Freezer`` may keep it
    (``test_freezer.py``). A read under way in its thread may still render the stream: not
    before that read's thread is done, even when the process stops (which cancels the read's
    task, not its thread). What its ``repr`` reads stays."""
    configure(settings, LIVE_UPDATES=True)
    monkeypatch.setattr(asgi_stream, "SERVED_BY", "live_streams")
    reading, go_on = threading.Event(), threading.Event()
    read_and_render = subscription.read_and_render

    def held_read(*args: Any, **kwargs: Any) -> Any:
        reading.set()
        go_on.wait(10)
        return read_and_render(*args, **kwargs)

    async def scenario() -> tuple[bool, bool, dict[str, Any], str]:
        stream = Stream(stream_url(room_widget()))
        await stream.open()
        listener = await only_listener()
        assert isinstance(listener, streaming.Stream)
        request = listener.request
        had_user = hasattr(request, "user")
        monkeypatch.setattr(subscription, "read_and_render", held_read)
        hub = subscription.hub()
        hub.changed(None)
        await asyncio.get_running_loop().run_in_executor(None, reading.wait, 10)
        if ending == "the process stops":
            hub.shut_down()
            await asyncio.sleep(0.1)  # the stream ends
        await stream.close()
        kept_while_read = hasattr(request, "user")
        go_on.set()
        for _ in range(500):
            if not hasattr(request, "user"):
                break
            await asyncio.sleep(0.01)
        return had_user, kept_while_read, dict(vars(request)), repr(request)

    had_user, kept_while_read, left, shown = run(scenario)
    assert had_user
    assert kept_while_read
    assert set(left) <= line.KEPT
    assert shown.startswith("<ASGIRequest: GET '/online/stream/?")


def test_live_streams_holds_each_stream_in_its_freezer_while_it_is_open(
    backend, settings, db, monkeypatch
):
    configure(settings, LIVE_UPDATES=True)
    freezers: list[Freezer] = []

    class Counted(Freezer):
        def __init__(self) -> None:
            super().__init__()
            freezers.append(self)

    monkeypatch.setattr("whos_online.asgi.Freezer", Counted)
    monkeypatch.setattr(asgi_stream, "SERVED_BY", "live_streams")

    async def scenario() -> tuple[int, int]:
        stream = Stream(stream_url(room_widget()))
        await stream.open()
        await only_listener()
        [freezer] = freezers
        held = freezer.open
        await stream.close()
        return held, freezer.open

    assert run(scenario) == (1, 0)


class Reader:
    """A stream as the hub sees it (``outbox.Listener``), of the site's list."""

    rooms = frozenset({""})

    def sought(self) -> dict[str, list[Any]]:
        return {}

    def send(self, event: str) -> None:
        pass

    def stale(self) -> None:
        pass

    def render(self, found: Any, shared: Any) -> str | None:
        return None

    def lost(self, config: Any) -> None:
        pass

    def end(self) -> None:
        pass

    def tick(self, now: float | None = None) -> bool:
        return True


def test_a_stream_that_ended_is_not_kept_until_the_next_change(backend, settings, monkeypatch):
    """The hub's read lets go of the streams it read once it is done: a stream that ends after
    it is freed with its connection's objects, not kept until the next change is read."""
    configure(settings, LIVE_UPDATES=True)
    read = threading.Event()

    def read_and_render(rooms: Any, listeners: list[Any], *args: Any, **kwargs: Any) -> Any:
        read.set()
        return ["data: 1\n\n" for _ in listeners]

    monkeypatch.setattr(subscription, "read_and_render", read_and_render)

    async def scenario() -> bool:
        hub = subscription.hub()
        reader = Reader()
        hub.add(reader)
        hub.changed(None)
        await asyncio.get_running_loop().run_in_executor(None, read.wait, 10)
        await asyncio.sleep(0.05)  # its events handed out
        kept = weakref.ref(reader)
        hub.discard(reader)
        del reader
        freed = kept() is None
        hub.stop()
        await asyncio.sleep(0)
        return freed

    assert asyncio.run(scenario())
    assert read.is_set()


def unzipped(bodies: list[bytes]) -> bytes:
    """What gzip-compressed ``bodies`` say so far: one gzip member per event (Django 5.2), or
    one member flushed at each (Django 6.1)."""
    compressed, found = b"".join(bodies), b""
    while compressed:
        member = zlib.decompressobj(wbits=31)
        found += member.decompress(compressed)
        compressed = member.unused_data
    return found


def test_a_stream_a_middleware_compressed_goes_on_through_django_s_response(
    backend, settings, db, monkeypatch
):
    """``GZipMiddleware`` compresses the stream for a browser that accepts gzip: events added
    to it as they are would be garbage. The response is left to Django, which carries the whole
    stream (each event compressed), as without ``LiveStreams``."""
    configure(settings, LIVE_UPDATES=True)
    settings.MIDDLEWARE = ["django.middleware.gzip.GZipMiddleware", *settings.MIDDLEWARE]
    monkeypatch.setattr(asgi_stream, "SERVED_BY", "live_streams")

    async def scenario() -> tuple[str, type, list[bytes]]:
        stream = Stream(stream_url(room_widget()))
        headers = stream.scope["headers"]
        assert isinstance(headers, list)
        headers.append((b"accept-encoding", b"gzip"))
        await stream.open()
        listener = await only_listener()
        assert isinstance(listener, streaming.Stream)
        listener.send("data: 1\n\n")
        bodies: list[bytes] = []
        while b"data: 1\n\n" not in unzipped(bodies) and len(bodies) < 10:
            bodies.append((await asyncio.wait_for(stream._outbox.get(), 10))["body"])
        await stream.close()
        return stream.headers.get("content-encoding", ""), type(listener.outbox), bodies

    encoding, outbox, bodies = run(scenario)
    assert encoding == "gzip"
    assert outbox is Outbox
    received = unzipped(bodies)
    assert received.startswith(b"retry: ")
    assert received.endswith(b"\n\ndata: 1\n\n")
