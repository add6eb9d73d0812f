"""``whos_online.asgi.LiveStreams`` leaves alone what is not a live stream: another path, another
kind of scope, and a stream Django answered without opening it (204, 400). The streams it serves
are tests/test_stream*.py's (served both ways)."""

from __future__ import annotations

import asyncio
from typing import Any

from whos_online.asgi import LiveStreams
from whos_online.live.opening import OPENING


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
