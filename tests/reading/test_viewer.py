"""The reader on their own page in every state it shows: the tag's render, the live stream's
first state and every one after, and the widget's refreshes, whichever process wrote their
visit and whenever it reached Redis; and after Redis lost its data, recorded again at once."""

from __future__ import annotations

import html
import re
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import pytest
from asgiref.sync import sync_to_async

import whos_online
from tests.support.asgi_stream import Stream
from tests.support.helpers import client_of, configure, widget_text
from tests.test_stream import record_guest, record_user, run, site_widget, texts, until
from whos_online.live import subscription
from whos_online.reading import snapshots

if TYPE_CHECKING:
    from django.test import Client

PAGE_VIEW: dict[str, Any] = {"HTTP_SEC_FETCH_DEST": "document", "HTTP_SEC_FETCH_MODE": "navigate"}
TOPIC_1, TOPIC_2 = "topic:1", "topic:2"


@pytest.fixture
def live(backend, settings, db) -> None:
    configure(settings, LIVE_UPDATES=True, SHOW_NAMES_TO="everyone", SNAPSHOT_MAX_AGE=60)


def widget_of(page: str) -> str:
    """The query of the live widget a page rendered (what its stream and refreshes ask for)."""
    found = re.search(r'data-whos-online-live="/online/widget/\?([^"]*)"', page)
    assert found is not None, page
    return html.unescape(found.group(1))


def cookies_of(client: Client) -> dict[str, str]:
    return {name: morsel.value for name, morsel in client.cookies.items()}


def open_page(client: Client, pk: int) -> str:
    """A page view of topic ``pk``: the query of its room's live widget."""
    response = client.get(f"/topics/{pk}/", **PAGE_VIEW)
    assert response.status_code == 200
    return widget_of(response.content.decode())


def not_written_yet(r: Any, member: str, *, kind: str = "users") -> None:
    """Take ``member``'s move to topic 2 back out of Redis, as if the process that served it had
    not flushed it yet: still in topic 1 as far as Redis knows."""
    r.zrem(f"{{whos_online}}:room:{TOPIC_2}:{kind}", member)
    r.zadd(f"{{whos_online}}:room:{TOPIC_1}:{kind}", {member: 9_999_999_999})
    r.hset(
        "{whos_online}:rooms:where",
        f"u:{member}" if kind == "users" else f"{kind}:{member}",
        TOPIC_1,
    )


def stream_of(*queries: str) -> str:
    return f"/online/stream/?{urlencode([('widget', query) for query in queries])}"


def test_the_first_state_names_a_reader_whose_move_is_still_on_its_way(live, r, alice, bob):
    """The trial's finding: the page named them, then the stream's first state said "nobody",
    read from a snapshot kept from before their visit was written (another process's)."""
    whos_online.record_user(bob, room=TOPIC_1)
    reader = client_of(alice)
    open_page(reader, 1)
    snapshots.read(50, max_age=60, room=TOPIC_2)  # kept: topic 2 with nobody in it
    widget = open_page(reader, 2)
    not_written_yet(r, str(alice.pk))

    async def scenario() -> tuple[list[str], list[list[str]]]:
        stream = await Stream(stream_of(widget), cookies=cookies_of(reader)).open()
        first = texts(await stream.state())
        await record_user(alice, room=TOPIC_2)  # the move reaches Redis
        await record_guest("198.51.100.9", room=TOPIC_2)
        seen = await until(stream, ["Here now: alice and 1 guest"], users=1)
        await stream.close()
        return first, seen

    first, seen = run(scenario)
    assert first == ["Here now: alice"]
    assert all("alice" in state[0] for state in seen)  # in every state after, counted once


def test_a_reader_whose_visit_was_written_is_counted_once(live, alice):
    reader = client_of(alice)
    widget = open_page(reader, 2)

    async def scenario() -> list[dict[str, Any]]:
        stream = await Stream(stream_of(widget), cookies=cookies_of(reader)).open()
        first = await stream.state()
        await stream.close()
        return first

    first = run(scenario)
    assert texts(first) == ["Here now: alice"]
    assert 'data-users="1"' in first[0]["html"]


def test_a_guest_on_their_own_page_is_one_guest_before_and_after_their_visit_lands(live, r):
    reader = client_of()
    open_page(reader, 1)
    widget = open_page(reader, 2)
    member = r.zrange(f"{{whos_online}}:room:{TOPIC_2}:guests", 0, -1)[0].decode()
    not_written_yet(r, member, kind="guests")

    async def scenario() -> tuple[list[str], list[list[str]]]:
        stream = await Stream(stream_of(widget), cookies=cookies_of(reader)).open()
        first = texts(await stream.state())
        await record_guest("203.0.113.7", room=TOPIC_2)  # the reader's own visit lands
        await record_guest("198.51.100.9", room=TOPIC_2)
        seen = await until(stream, ["Here now: 2 guests"])
        await stream.close()
        return first, seen

    first, seen = run(scenario)
    assert first == ["Here now: 1 guest"]
    assert seen[-1] == ["Here now: 2 guests"]


def test_after_redis_lost_its_data_an_open_page_records_its_reader_again(live, r, alice, bob):
    reader = client_of(alice)
    widget = open_page(reader, 2)

    async def scenario() -> list[list[str]]:
        stream = await Stream(stream_of(widget, site_widget()), cookies=cookies_of(reader)).open()
        assert texts(await stream.state()) == ["Here now: alice", "Who's online: alice"]
        await _flushdb(r)  # a restart without its data
        await record_user(bob, room=TOPIC_2)  # whatever change comes next is read
        seen = await until_both(stream, "alice", "bob")
        await stream.close()
        return seen

    seen = run(scenario)
    assert all("alice" in state[0] for state in seen)
    assert r.zscore(f"{{whos_online}}:room:{TOPIC_2}:users", str(alice.pk)) is not None
    assert r.zscore("{whos_online}:users", str(alice.pk)) is not None


def test_back_from_an_outage_a_reader_this_process_wrote_lately_is_recorded_again(live, r, alice):
    """Only the subscription saw Redis go (no request of this process failed), and this process
    wrote the reader moments before: the read after the subscription is back must tell it that
    the data is gone before its memory of that write can spare the write that brings them back.
    """
    reader = client_of(alice)
    widget = open_page(reader, 2)  # written, and remembered, by this process

    async def scenario() -> list[str | None] | None:
        stream = await Stream(stream_of(widget), cookies=cookies_of(reader)).open()
        await stream.state()
        (listener,) = subscription.hub().listeners
        await _flushdb(r)  # a restart without its data
        events = await sync_to_async(subscription.read_and_render)(
            sorted(listener.rooms), [listener], {}, lost=True
        )
        await stream.close()
        return events

    events = run(scenario)
    assert r.zscore(f"{{whos_online}}:room:{TOPIC_2}:users", str(alice.pk)) is not None
    assert events == []  # no state from a read made before they were recorded again


async def until_both(stream: Stream, *names: str, timeout: float = 10) -> list[list[str]]:
    """The states the stream sends until every widget of one names all of ``names`` (in
    whichever order: who was seen last comes first)."""
    deadline = time.monotonic() + timeout
    seen: list[list[str]] = []
    while time.monotonic() < deadline:
        seen.append(texts(await stream.state(deadline - time.monotonic())))
        if all(name in text for text in seen[-1] for name in names):
            return seen
    raise AssertionError(f"never {names}: {seen}")


async def _flushdb(r: Any) -> None:
    from asgiref.sync import sync_to_async

    await sync_to_async(r.flushdb)()


def test_a_refresh_right_after_a_move_names_the_reader(live, r, alice):
    """Under WSGI the page polls as soon as its stream says 204: moments after the move."""
    reader = client_of(alice)
    open_page(reader, 1)
    snapshots.read(50, max_age=60, room=TOPIC_2)  # kept: nobody in topic 2
    widget = open_page(reader, 2)
    not_written_yet(r, str(alice.pk))

    polled = reader.get(f"/online/widgets/?{urlencode({'widget': widget})}")

    assert [widget_text(one["html"]) for one in polled.json()["widgets"]] == ["Here now: alice"]
    assert "private" in polled["Cache-Control"]


def test_a_refresh_after_redis_lost_its_data_records_the_reader_again(live, r, alice):
    reader = client_of(alice)
    widget = open_page(reader, 2)
    snapshots.read(50, room=TOPIC_2)  # this process knows the epoch of the data it reads
    r.flushdb()
    snapshots.read(50, room=TOPIC_2)  # and learns that it is gone

    polled = reader.get(f"/online/widgets/?{urlencode({'widget': widget})}")

    assert [widget_text(one["html"]) for one in polled.json()["widgets"]] == ["Here now: alice"]
    assert r.zscore(f"{{whos_online}}:room:{TOPIC_2}:users", str(alice.pk)) is not None


def test_a_reload_right_after_arriving_names_the_reader_once(live, r, alice):
    """The tag's own render: a reload of the room just entered, in the process that keeps a
    snapshot of it from before the visit was written."""
    reader = client_of(alice)
    open_page(reader, 1)
    snapshots.read(50, max_age=60, room=TOPIC_2)
    open_page(reader, 2)
    not_written_yet(r, str(alice.pk))

    page = reader.get("/topics/2/", **PAGE_VIEW).content.decode()

    assert widget_text(page).endswith("Here now: alice")
    assert 'data-users="1"' in page


def test_a_new_tab_back_in_a_room_this_process_wrote_its_reader_in_before_names_them(
    live, r, alice
):
    """A tab with only the session cookie (no throttle cookie), back in a room this process
    wrote its reader in a few pages ago, though another process has since moved them to another
    room: the snapshot kept since they left does not count them, whatever this process's memory
    of that older write says."""
    reader = client_of(alice)
    open_page(reader, 1)  # this process writes her in topic 1, and remembers it
    r.zrem(f"{{whos_online}}:room:{TOPIC_1}:users", str(alice.pk))  # another process moves
    r.zadd(f"{{whos_online}}:room:{TOPIC_2}:users", {str(alice.pk): 9_999_999_999})  # her on
    r.hset("{whos_online}:rooms:where", f"u:{alice.pk}", TOPIC_2)
    snapshots.read(50, max_age=60, room=TOPIC_1)  # kept: topic 1 without her
    new_tab = client_of()
    new_tab.cookies["sessionid"] = reader.cookies["sessionid"].value

    page = new_tab.get("/topics/1/", **PAGE_VIEW).content.decode()

    assert widget_text(page).endswith("Here now: alice")
