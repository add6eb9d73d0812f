"""The live stream (``whos_online:stream``) through Django's ASGI handler, on fakeredis and a real
Redis: the state first, a new one for each change of its rooms, the rules of the widgets view
(names, hidden users, room tokens), its end when a token runs out, and 204 under WSGI."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import threading
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django import db as django_db
from django.conf import settings as django_settings
from django.test import Client
from django.urls import reverse

import whos_online
from tests.support.asgi_stream import Stream
from tests.support.helpers import client_of, configure, log_in_quietly, widget_text
from whos_online.live.widget import WidgetOptions
from whos_online.reading import viewer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

URL = "/online/stream/"
ROOM = "topic:1"


pytestmark = pytest.mark.usefixtures("served_by")


@pytest.fixture
def live(backend, settings, db) -> None:
    configure(settings, LIVE_UPDATES=True, SHOW_NAMES_TO="authenticated")


def room_widget(room: str = ROOM, *, token: str | None = None, site: bool = False) -> str:
    query = WidgetOptions(peak=False, visitors=False, refresh=30, room=room, site=site).query(None)
    if token is not None:
        query = query.replace(f"token={viewer.room_token(room)}", f"token={token}")
    return query


def site_widget() -> str:
    return WidgetOptions(peak=False, visitors=False, refresh=30).query(None)


def stream_url(*queries: str) -> str:
    return f"{URL}?{urlencode([('widget', query) for query in queries])}"


def run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    """Run ``scenario`` on an event loop, its sync calls on this thread (the test database's)."""
    return async_to_sync(scenario)()


def texts(state: list[dict[str, Any]]) -> list[str]:
    return [widget_text(answer["html"]) for answer in state]


async def until(
    stream: Stream, wanted: list[str], *, users: int | None = None, timeout: float = 10
) -> list[list[str]]:
    """The states the stream sends until one reads ``wanted`` (and counts ``users`` in its
    first widget), within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    seen: list[list[str]] = []
    with contextlib.suppress(asyncio.TimeoutError):
        while time.monotonic() < deadline:
            state = await stream.state(deadline - time.monotonic())
            seen.append(texts(state))
            if seen[-1] == wanted and (
                users is None or f'data-users="{users}"' in state[0]["html"]
            ):
                return seen
    raise AssertionError(f"never {wanted}: {seen}")


record_guest = sync_to_async(whos_online.record_guest)
record_user = sync_to_async(whos_online.record_user)


def test_the_url_is_named():
    assert reverse("whos_online:stream") == URL


def test_a_stream_sends_the_state_then_a_join_and_a_leave(live):
    whos_online.record_guest("198.51.100.1", room=ROOM)

    async def scenario() -> None:
        stream = await Stream(stream_url(room_widget(), site_widget())).open()
        assert stream.status == 200
        assert stream.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert stream.headers["cache-control"] == "no-cache"
        assert stream.headers["x-accel-buffering"] == "no"
        first = await stream.state()
        assert [answer["status"] for answer in first] == [200, 200]
        assert texts(first) == ["Here now: 1 guest", "Who's online: 1 guest"]

        await record_guest("198.51.100.2", room=ROOM)  # a join
        await until(stream, ["Here now: 2 guests", "Who's online: 2 guests"])
        await record_guest("198.51.100.2", room="topic:2")  # and a leave of the room
        await until(stream, ["Here now: 1 guest", "Who's online: 2 guests"])
        await stream.close()

    run(scenario)


def request_threads() -> set[threading.Thread]:
    """The threads of asgiref's per-request executors (a thread-sensitive context's own), as
    opposed to the event loop's default executor, which the subscription renders on."""
    return {t for t in threading.enumerate() if t.name.startswith("ThreadPoolExecutor-")}


async def settled(threads: Callable[[], set[threading.Thread]], timeout: float = 10) -> set[Any]:
    """``threads()`` once those ending have ended (a shut-down executor's thread ends a moment
    later): those still alive after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    for thread in threads():
        await asyncio.to_thread(thread.join, max(0.0, deadline - time.monotonic()))
    return {thread for thread in threads() if thread.is_alive()}


def test_an_open_stream_holds_no_thread_of_its_own(backend, settings, monkeypatch, served_by):
    """Served as an ASGI server serves it, each request with a thread of its own (no sync caller
    above it, unlike the other tests here), a stream that has sent its first state has closed
    that thread's database connections and let go of it: open pages are neither idle threads
    of the worker nor open connections to the database. What it sends afterwards comes all the
    same, and its end leaves no thread behind either. (Under ``LiveStreams`` Django's request
    is over once the first state is sent, and Django closes its connections as for any.)"""
    configure(settings, LIVE_UPDATES=True)
    closed_on: list[str] = []

    def close_all() -> None:
        closed_on.append(threading.current_thread().name)

    monkeypatch.setattr(django_db.connections, "close_all", close_all)
    whos_online.record_guest("198.51.100.1", room=ROOM)

    async def scenario() -> tuple[set[Any], list[list[str]], set[Any]]:
        before = request_threads()
        streams = [await Stream(stream_url(room_widget())).open() for _ in range(5)]
        for stream in streams:
            assert texts(await stream.state()) == ["Here now: 1 guest"]
        held = await settled(lambda: request_threads() - before)
        # On the loop's own executor: asgiref's for code outside any request has a thread too.
        await asyncio.to_thread(whos_online.record_guest, "198.51.100.2", room=ROOM)
        seen = await until(streams[0], ["Here now: 2 guests"])
        for stream in streams:
            await stream.close()
        return held, seen, await settled(lambda: request_threads() - before)

    held, seen, left = asyncio.run(scenario())

    assert held == set()
    assert len(closed_on) == (5 if served_by == "django" else 0)
    assert all(name.startswith("ThreadPoolExecutor-") for name in closed_on)  # each request's
    assert seen[-1] == ["Here now: 2 guests"]
    assert left == set()


def test_a_site_with_atomic_requests_opens_streams(live, monkeypatch):
    """Django will not run an async view inside ``ATOMIC_REQUESTS``'s transaction: unless the
    stream is exempt for every database that has it on, it answers 500."""
    for alias in django_db.connections.settings:
        monkeypatch.setitem(django_db.connections.settings[alias], "ATOMIC_REQUESTS", True)

    async def scenario() -> list[str]:
        stream = await Stream(stream_url(room_widget())).open()
        assert stream.status == 200
        first = texts(await stream.state())
        await stream.close()
        return first

    assert run(scenario) == ["Here now: nobody"]


def test_the_first_state_is_the_widgets_view_s_answer(live):
    whos_online.record_guest("198.51.100.1", room=ROOM)
    queries = [room_widget(), site_widget()]
    polled = Client().get(f"/online/widgets/?{urlencode([('widget', q) for q in queries])}")

    async def scenario() -> list[dict[str, Any]]:
        stream = await Stream(stream_url(*queries)).open()
        first = await stream.state()
        await stream.close()
        return first

    # Rendered moments apart: when the page renews its tokens counts down by the second.
    def settled(answers: list[dict[str, Any]]) -> list[dict[str, Any]]:
        renew = re.compile(r'data-whos-online-renew="\d+"')
        return [{**one, "html": renew.sub("", one.get("html", ""))} for one in answers]

    assert settled(run(scenario)) == settled(polled.json()["widgets"])


def test_names_go_only_to_whom_show_names_to_allows(live, alice, bob):
    whos_online.record_user(alice, room=ROOM)
    member = client_of(bob)
    log_in_quietly(member, bob)
    session = member.cookies[django_settings.SESSION_COOKIE_NAME].value

    async def scenario() -> tuple[list[list[str]], list[list[str]]]:
        anonymous = await Stream(stream_url(site_widget())).open()
        named = await Stream(
            stream_url(site_widget()), cookies={django_settings.SESSION_COOKIE_NAME: session}
        ).open()
        firsts = texts(await anonymous.state()), texts(await named.state())
        await record_user(bob)
        seen = (
            await until(anonymous, ["Who's online: 2 users"]),
            await until(named, ["Who's online: bob and alice"]),
        )
        await anonymous.close()
        await named.close()
        assert firsts == (["Who's online: 1 user"], ["Who's online: alice"])
        return seen

    anonymous, _named = run(scenario)
    assert not any("alice" in text or "bob" in text for texts_ in anonymous for text in texts_)


def test_a_hidden_user_is_never_named(live, settings, alice, bob):
    configure(settings, HIDE_USER="tests.support.helpers.hide_bob", SHOW_NAMES_TO="everyone")
    whos_online.record_user(alice, room=ROOM)

    async def scenario() -> list[list[str]]:
        stream = await Stream(stream_url(room_widget())).open()
        assert texts(await stream.state()) == ["Here now: alice"]
        await record_user(bob, room=ROOM)
        seen = await until(stream, ["Here now: alice"], users=2)  # counted, not named
        await stream.close()
        return seen

    assert not any("bob" in text for state in run(scenario) for text in state)


def test_a_stream_ends_when_its_room_token_runs_out(live, settings):
    configure(settings, ROOM_TOKEN_MAX_AGE=60)
    almost_over = viewer.room_token(ROOM, now=time.time() - 58)

    async def scenario() -> list[tuple[str, str]]:
        stream = await Stream(stream_url(room_widget(token=almost_over))).open()
        events = [await stream.event()]
        events.append(await stream.event(timeout=10))
        events.append(await stream.event())
        await stream.close()
        return events

    first, end, after = run(scenario)
    assert first[0] == "message"
    assert end[0] == "end"
    assert after == ("", "")  # the stream ended


def test_a_refused_token_is_answered_and_nothing_is_followed(live):
    async def scenario() -> list[tuple[str, str]]:
        stream = await Stream(stream_url(room_widget(token="0.forged"))).open()
        events = [await stream.event(), await stream.event(), await stream.event()]
        await stream.close()
        return events

    first, end, after = run(scenario)
    assert '"status": 403' in first[1]
    assert end[0] == "end"
    assert after == ("", "")


def test_under_wsgi_the_stream_says_204_and_the_widget_polls(live):
    response = Client().get(stream_url(site_widget()))

    assert response.status_code == 204
    assert response.content == b""


def test_without_live_updates_the_stream_says_204(backend, db):
    async def scenario() -> int:
        stream = await Stream(stream_url(site_widget())).open()
        await stream.body()
        await stream.close()
        return stream.status

    assert run(scenario) == 204


def test_a_stream_needs_its_widgets(live):
    async def scenario() -> int:
        stream = await Stream(URL).open()
        await stream.body()
        await stream.close()
        return stream.status

    assert run(scenario) == 400


def test_redis_down_opens_a_stream_that_says_it_is_stale_with_one_warning(live, redis_down, caplog):
    async def scenario() -> list[tuple[str, str]]:
        streams = [await Stream(stream_url(site_widget())).open() for _ in range(2)]
        events = [await stream.event() for stream in streams]
        events += [await stream.event() for stream in streams]
        for stream in streams:
            await stream.close()
        return events

    with caplog.at_level(logging.WARNING, logger="whos_online"):
        first, _also_first, stale, also_stale = run(scenario)
    assert '"ok": false' in first[1]
    assert (stale[0], also_stale[0]) == ("stale", "stale")
    subscription = [r for r in caplog.records if "subscription" in r.getMessage()]
    assert len(subscription) == 1
