"""A real redis-server killed (SIGKILL) and started again on the same port under 200 open live
streams, driven through Django's ASGI handler in this process (``tests.support.asgi_stream``):
while it is down the streams say they are stale and pages are still served; the outage is
logged once; once it is back the process subscribes again and a change reaches every stream."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import TYPE_CHECKING, Any

import pytest
import redis
from asgiref.sync import sync_to_async
from django.test import Client

from tests.reading.test_viewer import cookies_of, widget_of
from tests.support.asgi_stream import Stream
from tests.support.helpers import client_of, configure
from tests.support.redis_server import RedisServer, running
from tests.test_stream import ROOM, record_user, room_widget, run, stream_url, texts
from whos_online.backend import clients, connection
from whos_online.config.settings import get_config

if TYPE_CHECKING:
    from collections.abc import Iterator

    from django.contrib.auth.models import AbstractUser

STREAMS = 200
#: Pages requested while Redis is down, each by another guest.
PAGES = 5
#: Generous: waits end as soon as what they wait for comes.
WAIT = 60.0

pytestmark = pytest.mark.slow


@pytest.fixture
def server(settings, db, monkeypatch) -> Iterator[RedisServer]:
    """A redis-server of this test's own (the session's must not be killed), the site on it,
    live updates on, a short back-off, no cap per address (every stream comes from one); and no
    read of every room every ``REFRESH_INTERVAL`` within the test, so that only the
    subscription can bring the streams back. The request client waits 2 s, not 0.25: a restart
    is what these tests are about, and on a busy machine a page's write to the new server timed
    out now and then (its reader then rightly shown nowhere until the write was retried)."""
    monkeypatch.setattr(clients, "REQUEST_TIMEOUT", 2.0)
    with running() as own:
        configure(
            settings,
            REDIS_URL=own.url,
            LIVE_UPDATES=True,
            SHOW_NAMES_TO="everyone",
            FAILURE_BACKOFF=1,
            REFRESH_INTERVAL=3600,
            MAX_STREAMS_PER_ADDRESS=None,
        )
        yield own


async def next_named(stream: Stream, wanted: str) -> tuple[str, list[str]]:
    """Events until one called ``wanted`` ("message" for a state): its name and texts."""
    while True:
        name, data = await stream.event(timeout=WAIT)
        assert name, "the stream ended"
        if name == wanted:
            return name, texts(json.loads(data)["widgets"]) if name == "message" else []


async def score_within(url: str, key: str, member: str, timeout: float = 10.0) -> float | None:
    """``member``'s score in ``key`` once it has one, or None after ``timeout`` seconds: the
    stream's state and the write that records its reader again go out at the same moment, and
    the write may land a little after the state."""
    direct = redis.Redis.from_url(url)
    deadline = asyncio.get_running_loop().time() + timeout
    while (score := direct.zscore(key, member)) is None:
        if asyncio.get_running_loop().time() > deadline:
            return None
        await asyncio.sleep(0.05)
    return score


async def until_named(stream: Stream, who: str) -> list[str]:
    """States until one names ``who``; that one's texts."""
    while True:
        state = texts(await stream.state(timeout=WAIT))
        if any(who in text for text in state):
            return state


def test_a_restart_under_open_streams(server, alice: AbstractUser, caplog):
    page = Client()

    def visit(number: int) -> int:
        response = page.get("/topics/1/", REMOTE_ADDR=f"198.51.100.{number}")
        return response.status_code

    async def scenario() -> dict[str, Any]:
        assert await sync_to_async(visit)(1) == 200
        streams = [await Stream(stream_url(room_widget())).open() for _ in range(STREAMS)]
        firsts = [texts(await stream.state(timeout=WAIT)) for stream in streams]

        assert server.process is not None
        server.process.kill()
        server.process.wait(timeout=10)
        stale = [await next_named(stream, "stale") for stream in streams]
        down_pages = [await sync_to_async(visit)(10 + n) for n in range(PAGES)]

        server.start()  # on the same port, empty
        # Subscribed again: every stream is sent the state of the moment.
        back = [await next_named(stream, "message") for stream in streams]
        subscribers = redis.Redis.from_url(server.url).pubsub_numsub("{whos_online}:changes")
        await record_user(alice, room=ROOM)  # a change after the restart
        after = [await until_named(stream, "alice") for stream in streams]
        for stream in streams:
            await stream.close()
        return {
            "firsts": firsts,
            "stale": stale,
            "down_pages": down_pages,
            "back": back,
            "subscribers": subscribers,
            "after": after,
        }

    with caplog.at_level(logging.INFO, logger="whos_online"):
        seen = run(scenario)

    assert seen["firsts"] == [["Here now: 1 guest"]] * STREAMS
    assert [name for name, _ in seen["stale"]] == ["stale"] * STREAMS
    assert seen["down_pages"] == [200] * PAGES
    assert [name for name, _ in seen["back"]] == ["message"] * STREAMS
    assert seen["subscribers"] == [(b"{whos_online}:changes", 1)]
    assert all("alice" in " ".join(state) for state in seen["after"])
    messages = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    subscription = [m for m in messages if "subscription" in m]
    assert len(subscription) == 1, messages
    assert len(messages) == len(set(messages)), messages  # one warning per outage and kind
    recovered = [r.getMessage() for r in caplog.records if r.levelno == logging.INFO]
    assert any("subscription" in m and "is back" in m for m in recovered), recovered


#: Streams opened at once: more than the request client's pool holds (redis-py's default 100).
BURST = 300


def test_a_burst_of_streams_opening_at_once_keeps_redis_up(server, caplog):
    """Every page of a site reconnects its stream within seconds of a restart. Each opening
    reads Redis in a thread of its own (Django runs each request's sync code in its own): all
    at once, they would take more connections than the pool has, and the breaker would take
    that for an outage of the whole process."""

    async def scenario() -> list[tuple[str, str]]:
        opening = [Stream(stream_url(room_widget())).open(timeout=WAIT) for _ in range(BURST)]
        streams = await asyncio.gather(*opening)
        firsts = [await stream.event(timeout=WAIT) for stream in streams]
        for stream in streams:
            await stream.close()
        return firsts

    with caplog.at_level(logging.WARNING, logger="whos_online"):
        # Not through async_to_sync (``run``), whose thread would take every opening in turn,
        # as no server does: each request gets a thread of its own, as under uvicorn.
        firsts = asyncio.run(scenario())

    assert [r.getMessage() for r in caplog.records] == []
    assert [name for name, _data in firsts] == ["message"] * BURST
    assert not [data for _name, data in firsts if '"ok": false' in data]


def test_a_reader_whose_page_stays_open_is_recorded_again_once_redis_is_back(
    server, alice: AbstractUser
):
    """Redis restarted without its data: the reader who stays on their page is back in it, and
    on it, as soon as the stream's subscription is, not at their page's next "still here"
    (``THROTTLE`` seconds later)."""
    reader = client_of(alice)
    page = reader.get("/topics/2/", HTTP_SEC_FETCH_DEST="document").content.decode()
    widget = widget_of(page)
    cookies = {name: morsel.value for name, morsel in reader.cookies.items()}

    async def scenario() -> tuple[list[str], list[str], float | None]:
        stream = await Stream(stream_url(widget), cookies=cookies).open()
        first = texts(await stream.state(timeout=WAIT))
        assert server.process is not None
        server.process.kill()
        server.process.wait(timeout=10)
        await next_named(stream, "stale")
        server.start()  # on the same port, empty
        _name, back = await next_named(stream, "message")
        score = await score_within(server.url, "{whos_online}:room:topic:2:users", str(alice.pk))
        await stream.close()
        return first, back, score

    first, back, score = run(scenario)

    assert first == ["Here now: alice"]
    assert back == ["Here now: alice"]
    assert score is not None


def test_a_reader_is_shown_again_once_the_subscription_is_back_whatever_the_back_off(
    server, settings, alice: AbstractUser
):
    """A page served while Redis was down opened the process's breaker for ``FAILURE_BACKOFF``
    (an hour here). The subscription that comes back shows that Redis answers: the stream's
    next state, and the write that records its reader again, do not wait out that back-off."""
    configure(settings, FAILURE_BACKOFF=3600)
    reader = client_of(alice)
    page = reader.get("/topics/2/", HTTP_SEC_FETCH_DEST="document").content.decode()
    widget = widget_of(page)
    guest = Client(REMOTE_ADDR="198.51.100.7")

    async def scenario() -> tuple[bool, list[str], float | None]:
        stream = await Stream(stream_url(widget), cookies=cookies_of(reader)).open()
        await stream.state(timeout=WAIT)
        assert server.process is not None
        server.process.kill()
        server.process.wait(timeout=10)
        await next_named(stream, "stale")
        await sync_to_async(guest.get)("/topics/1/")  # its read fails: the breaker opens
        opened = not connection.breaker().allows(get_config().redis_target)
        server.start()  # on the same port, empty
        _name, back = await next_named(stream, "message")
        score = await score_within(server.url, "{whos_online}:room:topic:2:users", str(alice.pk))
        await stream.close()
        return opened, back, score

    opened, back, score = run(scenario)

    assert opened
    assert back == ["Here now: alice"]
    assert score is not None
