"""Live streams that stay bounded and stop, through Django's ASGI handler in this process
(``tests.support.asgi_stream``): a client that stops reading holds one state, not a backlog; a
send that does not complete, and a stream past its end time, end whether or not the client reads;
a cancellation always ends a stream; SIGTERM ends every stream and refuses new ones; the caps per
process, per session and per address answer 503; ``HEAD`` opens nothing. The hub's tick is called
with the time it should see (``now=``). (Under a real server: ``tests/test_stream_servers.py``.)"""

from __future__ import annotations

import asyncio
import logging
import resource
import signal
import time
from typing import TYPE_CHECKING, Any

import pytest
from django.conf import settings as django_settings

from tests.support.asgi_stream import Stream
from tests.support.helpers import client_of, configure, log_in_quietly
from tests.test_stream import room_widget, run, site_widget, stream_url
from whos_online.config.settings import get_config
from whos_online.flushing import stopping
from whos_online.live import resources, streaming, subscription
from whos_online.live.outbox import END_GRACE, SEND_BOUND

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

    from whos_online.live.outbox import Listener


pytestmark = pytest.mark.usefixtures("served_by")


@pytest.fixture
def live(backend, settings, db) -> None:
    configure(settings, LIVE_UPDATES=True)


async def only_listener(before: frozenset[Listener] = frozenset()) -> Listener:
    """The one stream the hub has, but ``before``: served by ``LiveStreams``, a stream joins the
    hub once Django has finished its response, a moment after its first state came."""
    for _ in range(500):
        found = subscription.hub().listeners - before
        if found:
            [listener] = found
            return listener
        await asyncio.sleep(0.01)
    raise AssertionError("no stream joined the hub")


def sending_task(stream: Stream) -> asyncio.Task[Any]:
    """The task that sends ``stream``: up to Django 6.0 one the handler starts for it
    (``process_request``), from 6.1 the application's own."""
    found = [
        task
        for task in asyncio.all_tasks()
        if getattr(task.get_coro(), "__qualname__", "").endswith("process_request")
    ]
    if found:
        [task] = found
        return task
    assert stream.task is not None
    return stream.task


async def joined(count: int) -> frozenset[Listener]:
    """The hub's streams, once ``count`` have joined it (see ``only_listener``)."""
    for _ in range(500):
        found = frozenset(subscription.hub().listeners)
        if len(found) >= count:
            return found
        await asyncio.sleep(0.01)
    raise AssertionError(f"{count} streams never joined the hub")


async def stalled(url: str, opened: int = 0) -> tuple[Stream, streaming.Stream]:
    """A stream whose client has read its first state, then stopped reading, with a state that
    waits to be sent; ``opened`` streams were open before it."""
    before = await joined(opened)
    stream = await Stream(url).open()
    await stream.state()
    listener = await only_listener(before)
    assert isinstance(listener, streaming.Stream)
    stream.stop_reading()
    listener.send("data: 0\n\n")
    await stream.sending()
    return stream, listener


async def events_until_the_end(stream: Stream) -> list[tuple[str, str]]:
    events = []
    while True:
        events.append(await stream.event())
        if events[-1][0] == "":  # the response ended
            return events


# What a stream holds


def test_a_client_that_stops_reading_gets_the_newest_state_not_a_backlog(live):
    async def scenario() -> list[tuple[str, str]]:
        stream, listener = await stalled(stream_url(room_widget()))
        for number in range(1, 100):
            listener.send(f"data: {number}\n\n")
        stream.read_again()
        first = [await stream.event(), await stream.event()]
        listener.end()
        rest = await events_until_the_end(stream)
        await stream.close()
        return first + rest

    assert run(scenario) == [("message", "0"), ("message", "99"), ("end", ""), ("", "")]


@pytest.mark.parametrize("served_by", ["django"], indirect=True)
@pytest.mark.parametrize("turns", range(5))
def test_a_stream_cancelled_in_any_turn_after_a_state_came_ends(live, turns):
    """Django's handler cancels the task that sends a stream when its client goes (and the hub
    when a send does not complete). Python 3.11's ``asyncio.wait_for`` returned the item it
    waited for, instead of raising, when the cancellation came in the turn of the loop in which
    the item arrived: the stream ran on, sending into a closed connection, until its end time,
    and held its server's graceful stop for as long."""

    async def scenario() -> bool:
        stream = await Stream(stream_url(room_widget())).open()
        await stream.state()
        listener, task = await only_listener(), sending_task(stream)
        listener.send("data: 1\n\n")
        for _ in range(turns):
            await asyncio.sleep(0)
        task.cancel()
        ended = await stream.handled_within(5)
        await stream.close()
        return ended

    assert run(scenario) is True


# Bounds in time


def test_a_send_that_does_not_complete_within_the_bound_ends_the_stream(live):
    async def scenario() -> list[object]:
        stream, _listener = await stalled(stream_url(room_widget()))
        sent_at = time.time()
        hub = subscription.hub()
        hub.tick(sent_at + SEND_BOUND - 1)
        await asyncio.sleep(0.1)
        seen: list[object] = [stream.handled]
        hub.tick(sent_at + SEND_BOUND)
        seen += [await stream.handled_within(10), set(hub.listeners)]
        seen.append(resources.caps().open_streams())
        await stream.close()
        return seen

    assert run(scenario) == [False, True, set(), 0]


def test_a_stream_ends_at_its_end_time_whether_or_not_its_client_reads(live):
    async def scenario() -> list[object]:
        reading = await Stream(stream_url(room_widget())).open()
        await reading.state()
        stream, _listener = await stalled(stream_url(room_widget()), opened=1)
        # Their end time a moment after the send began to wait, well within ``SEND_BOUND``.
        ends_at = time.time() + 1
        for listener in await joined(2):
            assert isinstance(listener, streaming.Stream)
            listener.outbox.ends_at = ends_at
        hub = subscription.hub()
        hub.tick(ends_at)
        seen: list[object] = [await events_until_the_end(reading), stream.handled]
        hub.tick(ends_at + END_GRACE)
        seen += [await stream.handled_within(10), hub.listeners]
        for one in (reading, stream):
            await one.close()
        return seen

    read, not_read_yet, ended, left = run(scenario)
    assert read[-2:] == [("end", ""), ("", "")]  # its end, then the end of the response
    assert not_read_yet is False
    assert ended is True
    assert left == set()


# SIGTERM


def test_sigterm_ends_every_stream_and_refuses_new_ones(live):
    """The SIGTERM handler (here called as the signal would) has the hub end each stream: those
    read send their end, and their responses end; one whose client stopped reading is cancelled
    after a grace; new streams are refused; the subscription stops."""

    async def scenario() -> dict[str, Any]:
        reading = [await Stream(stream_url(room_widget())).open() for _ in range(3)]
        for stream in reading:
            await stream.state()
        not_read = await Stream(stream_url(room_widget())).open()
        await not_read.state()
        hub = subscription.hub()
        not_read.stop_reading()
        for listener in await joined(4):
            listener.send("data: 0\n\n")
        await not_read.sending()

        stopping.WriteThenHandOn(lambda signum, frame: None)(signal.SIGTERM, None)
        seen: dict[str, Any] = {
            "read": [await events_until_the_end(stream) for stream in reading],
        }
        refused = await Stream(stream_url(room_widget())).open()
        seen["refused"] = (refused.status, refused.headers.get("retry-after"))
        seen["not read, at once"] = not_read.handled
        hub.tick(time.time() + END_GRACE)
        seen["not read, after the grace"] = await not_read.handled_within(10)
        seen["subscription ended"] = hub.done
        seen["listeners"] = hub.listeners
        for stream in [*reading, not_read, refused]:
            await stream.close()
        return seen

    seen = run(scenario)
    assert [events[-2:] for events in seen["read"]] == [[("end", ""), ("", "")]] * 3
    assert seen["refused"] == (503, "30")
    assert seen["not read, at once"] is False
    assert seen["not read, after the grace"] is True
    assert seen["subscription ended"] is True
    assert seen["listeners"] == set()


def test_the_first_hub_installs_the_handler_over_one_the_server_set_later(live):
    """uvicorn, run as one process, sets its own SIGTERM handler after the site was loaded (and
    with it whos_online's): the hub of the first stream installs whos_online's again, over it,
    so that the signal reaches the streams before uvicorn waits for their responses."""
    before = signal.getsignal(signal.SIGTERM)

    def server_s(signum: int, frame: object) -> None:
        """Stands for uvicorn's ``Server.handle_exit``."""

    async def scenario() -> None:
        subscription.hub().stop()

    signal.signal(signal.SIGTERM, server_s)
    try:
        asyncio.run(scenario())  # on the main thread, as a server's event loop
        installed = signal.getsignal(signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, before)

    assert isinstance(installed, stopping.WriteThenHandOn)
    assert installed.previous is server_s


# Caps


def test_past_the_process_cap_the_view_answers_503_and_logs_once(live, settings, caplog):
    configure(settings, MAX_STREAMS=2)

    async def scenario() -> list[Any]:
        opened = [await Stream(stream_url(room_widget())).open() for _ in range(2)]
        refused = [await Stream(stream_url(room_widget())).open() for _ in range(5)]
        seen: list[Any] = [
            [stream.status for stream in opened],
            [(stream.status, stream.headers.get("retry-after")) for stream in refused],
            refused[0].headers.get("connection"),
        ]
        await opened[0].close()
        again = await Stream(stream_url(room_widget())).open()
        seen.append(again.status)
        for stream in [*opened[1:], *refused, again]:
            await stream.close()
        seen.append(resources.caps().open_streams())
        return seen

    with caplog.at_level(logging.WARNING, logger="whos_online"):
        statuses, refusals, connection, again, left = run(scenario)

    assert statuses == [200, 200]
    assert refusals == [(503, "30")] * 5
    assert connection == "close"
    assert again == 200
    assert left == 0
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "MAX_STREAMS" in warnings[0]


def session_of(user: AbstractUser) -> dict[str, str]:
    member = client_of(user)
    log_in_quietly(member, user)
    name = django_settings.SESSION_COOKIE_NAME
    return {name: member.cookies[name].value}


def test_a_session_has_a_cap_of_its_own_and_an_address_without_one_another(
    live, settings, alice: AbstractUser, bob: AbstractUser
):
    """Sessions are counted apart from their address, so people behind one address who have
    sessions never share a cap; a cookie that names no session counts as none."""
    configure(settings, MAX_STREAMS_PER_CLIENT=2, MAX_STREAMS_PER_ADDRESS=3)
    alices, bobs = session_of(alice), session_of(bob)
    forged = {django_settings.SESSION_COOKIE_NAME: "x" * 32}

    async def statuses(cookies: dict[str, str] | None, count: int) -> list[int]:
        found = []
        for _ in range(count):
            stream = await Stream(stream_url(site_widget()), cookies=cookies).open()
            opened.append(stream)
            found.append(stream.status)
        return found

    opened: list[Stream] = []

    async def scenario() -> list[list[int]]:
        seen = [await statuses(alices, 3), await statuses(bobs, 2)]
        seen += [await statuses(None, 2), await statuses(forged, 2)]
        seen.append(await statuses(None, 1))
        for stream in opened:
            await stream.close()
        return seen

    assert run(scenario) == [[200, 200, 503], [200, 200], [200, 200], [200, 503], [503]]


def test_an_episode_of_refusals_is_logged_once_until_a_quiet_minute(settings, caplog):
    configure(settings, MAX_STREAMS=1)
    caps = resources.caps()
    client = resources.Client(resources.Cap.ADDRESS, "198.51.100.1")
    config = get_config()
    now = 1_700_000_000.0
    assert caps.admit(config, client, now) is not None

    with caplog.at_level(logging.WARNING, logger="whos_online"):
        refused = [
            caps.admit(config, client, now + offset)
            for offset in (1, 30, 80, 130, 130 + resources.EPISODE_QUIET)
        ]

    assert refused == [None] * 5
    assert len(caplog.records) == 2  # at 1 s, and after a quiet minute (130 + 60 s)


def test_the_default_cap_is_half_the_open_files(monkeypatch):
    monkeypatch.setattr(resource, "getrlimit", lambda which: (160, 4096))
    assert resources.default_max_streams() == 80


# HEAD


def test_head_opens_no_stream(live):
    async def scenario() -> tuple[int, str, int]:
        stream = await Stream(stream_url(room_widget()), method="HEAD").open()
        await stream.body()
        await stream.close()
        return stream.status, stream.headers.get("allow", ""), resources.caps().open_streams()

    assert run(scenario) == (405, "GET", 0)
