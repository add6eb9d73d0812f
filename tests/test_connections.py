"""Presence held by connections: ``enter`` and ``leave`` put a person in a room while any of their
connections there is open, apart from the room of their page."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

import pytest
import redis

import whos_online
from tests.support.helpers import configure
from whos_online import api
from whos_online.config.settings import get_config
from whos_online.flushing import flusher
from whos_online.recording.guests import guest_id
from whos_online.signals import came_online, entered_room, left_room

if TYPE_CHECKING:
    from collections.abc import Iterator

    from django.contrib.auth.models import AbstractUser

CHAT = "chat:lobby"
ADDRESS = "198.51.100.7"


def names(room: str | None) -> list[str]:
    return sorted(user.name for user in whos_online.online_users(room=room))


def guests_in(room: str) -> int:
    return whos_online.online_counts(room=room).guests


def page_view(user: AbstractUser, room: str | None, now: float | None = None) -> None:
    """A page view of ``user`` in ``room`` (in none for None), as the middleware records it."""
    assert whos_online.record_user(user, room=room, now=now)


def test_two_connections_hold_a_room_until_the_last_leaves(backend, alice):
    whos_online.enter(CHAT, user=alice, connection="tab-1")
    whos_online.enter(CHAT, user=alice, connection="tab-2")
    assert names(CHAT) == ["alice"]

    whos_online.leave(CHAT, user=alice, connection="tab-1")
    assert names(CHAT) == ["alice"]

    whos_online.leave(CHAT, user=alice, connection="tab-2")
    assert names(CHAT) == []
    assert names(None) == ["alice"]  # still online on the site


def test_a_guest_is_held_by_their_address_s_connections(backend, db):
    whos_online.enter(CHAT, address=ADDRESS, connection="a")
    whos_online.enter(CHAT, address=ADDRESS, connection="b")
    assert guests_in(CHAT) == 1

    whos_online.leave(CHAT, address=ADDRESS, connection="a")
    assert guests_in(CHAT) == 1
    whos_online.leave(CHAT, address=ADDRESS, connection="b")
    assert guests_in(CHAT) == 0
    assert whos_online.online_counts().guests == 1


def test_a_page_view_elsewhere_takes_nobody_out_of_a_connection_room(backend, alice):
    page_view(alice, "page:a")
    whos_online.enter(CHAT, user=alice, connection="socket")

    page_view(alice, "page:b")
    page_view(alice, None)
    page_view(alice, "page:c")

    assert names(CHAT) == ["alice"]
    assert names("page:c") == ["alice"]
    assert names("page:a") == names("page:b") == []


def test_leaving_a_connection_room_takes_nobody_off_their_page(backend, alice):
    page_view(alice, "page:a")
    whos_online.enter(CHAT, user=alice, connection="socket")

    whos_online.leave(CHAT, user=alice, connection="socket")

    assert names("page:a") == ["alice"]
    assert names(CHAT) == []


def test_a_person_reads_a_page_and_is_in_several_chats_at_once(backend, alice, bob):
    page_view(alice, "page:a")
    whos_online.enter("chat:1", user=alice, connection="s1")
    whos_online.enter("chat:2", user=alice, connection="s2")
    whos_online.enter("chat:2", user=bob, connection="s3")

    assert names("page:a") == names("chat:1") == ["alice"]
    assert names("chat:2") == ["alice", "bob"]
    assert whos_online.online_counts(room="chat:2").users == 2


def test_leaving_the_room_that_is_also_their_page_room_keeps_them_there(backend, alice):
    page_view(alice, CHAT)
    whos_online.enter(CHAT, user=alice, connection="socket")

    whos_online.leave(CHAT, user=alice, connection="socket")

    assert names(CHAT) == ["alice"]  # the chat's page is still the one they read
    page_view(alice, "page:b")
    assert names(CHAT) == []


def test_a_page_view_out_of_a_room_a_connection_holds_keeps_them_in_it(backend, alice):
    page_view(alice, CHAT)
    whos_online.enter(CHAT, user=alice, connection="socket")

    page_view(alice, "page:b")
    assert names(CHAT) == ["alice"]
    whos_online.leave(CHAT, user=alice, connection="socket")

    assert names(CHAT) == []  # the page they read is no longer the chat's
    assert names("page:b") == ["alice"]


def test_a_closed_page_of_a_room_a_connection_holds_keeps_them_in_it(backend, alice):
    page_view(alice, CHAT)
    whos_online.enter(CHAT, user=alice, connection="socket")
    now = time.time()

    flusher.leave_room("users", str(alice.pk), CHAT, now - 60)  # the page's leaving word

    assert names(CHAT) == ["alice"]
    whos_online.leave(CHAT, user=alice, connection="socket")
    assert names(CHAT) == []


def test_entering_keeps_them_online_on_the_site_and_in_their_page_room(backend, alice):
    window = get_config().window
    long_ago = time.time() - window + 5
    page_view(alice, "page:a", now=long_ago)

    whos_online.enter(CHAT, user=alice, connection="socket")

    seen = whos_online.last_seen(alice)
    assert seen is not None
    assert seen.timestamp() > long_ago + 4
    assert names("page:a") == ["alice"]


def test_a_connection_that_stops_renewing_drops_out_after_the_window(backend, alice, bob):
    window = get_config().window
    now = time.time()
    whos_online.enter(CHAT, user=alice, connection="quiet", now=now - window - 1)
    whos_online.enter(CHAT, user=bob, connection="renewed", now=now - window - 1)
    whos_online.enter(CHAT, user=bob, connection="renewed", now=now - 10)  # renews it

    assert names(CHAT) == ["bob"]


def test_a_dead_connection_does_not_hold_the_room_once_the_live_one_leaves(backend, alice):
    window = get_config().window
    now = time.time()
    whos_online.enter(CHAT, user=alice, connection="died", now=now - window - 1)
    whos_online.enter(CHAT, user=alice, connection="live", now=now - 5)

    whos_online.leave(CHAT, user=alice, connection="live", now=now)

    assert names(CHAT) == []


def test_a_person_s_connections_expire_with_their_last_renewal(backend, r, alice):
    whos_online.enter(CHAT, user=alice, connection="socket")

    key = f"{{whos_online}}:links:u:{alice.pk}"
    assert r.zcard(key) == 1
    assert get_config().window < r.ttl(key) <= get_config().window + 60


def test_leaving_twice_or_without_entering_changes_nothing(backend, alice, bob):
    whos_online.enter(CHAT, user=bob, connection="other")

    assert whos_online.leave(CHAT, user=alice, connection="never")
    whos_online.leave(CHAT, user=bob, connection="never")

    assert names(CHAT) == ["bob"]


def test_a_hidden_user_is_counted_in_the_room_not_named(backend, hiding_bob, bob):
    whos_online.enter(CHAT, user=bob, connection="socket")

    assert names(CHAT) == []
    assert whos_online.online_counts(room=CHAT).users == 1
    whos_online.leave(CHAT, user=bob, connection="socket")
    assert whos_online.online_counts(room=CHAT).users == 0


def test_forgetting_a_user_takes_them_out_of_their_connections_rooms(backend, r, alice):
    whos_online.enter(CHAT, user=alice, connection="socket")

    assert whos_online.forget_user(alice)

    assert whos_online.online_counts(room=CHAT).users == 0
    assert not r.exists(f"{{whos_online}}:links:u:{alice.pk}")


def test_rooms_spread_over_shards_hold_people_by_their_connections(backend, settings, db):
    configure(settings, SHARDS=4)
    from django.contrib.auth import get_user_model

    people = [get_user_model().objects.create_user(f"u{n}", password="pw") for n in range(8)]
    for person in people:
        whos_online.enter(CHAT, user=person, connection=f"a{person.pk}")
        whos_online.enter(CHAT, user=person, connection=f"b{person.pk}")
        page_view(person, "page:elsewhere")
    whos_online.enter(CHAT, address=ADDRESS, connection="guest")

    assert whos_online.online_counts(room=CHAT).total == 9
    for person in people[:4]:
        whos_online.leave(CHAT, user=person, connection=f"a{person.pk}")
        whos_online.leave(CHAT, user=person, connection=f"b{person.pk}")
    whos_online.leave(CHAT, user=people[4], connection=f"a{people[4].pk}")

    assert names(CHAT) == [f"u{n}" for n in range(4, 8)]
    assert whos_online.online_counts(room="page:elsewhere").users == 8


@pytest.mark.parametrize(
    ("person", "problem"),
    [
        ({}, "a guest named by an IPv4 or IPv6 address"),
        ({"address": "not an address"}, "not 'not an address'"),
    ],
)
def test_a_connection_needs_a_person(db, person: dict[str, Any], problem: str):
    with pytest.raises(ValueError, match=problem):
        whos_online.enter(CHAT, connection="socket", **person)


@pytest.mark.parametrize("connection", ["", "x" * 201, None])
def test_a_connection_is_named_by_short_text(db, connection: object):
    with pytest.raises(ValueError, match="A connection is named by text"):
        whos_online.enter(CHAT, address=ADDRESS, connection=connection)  # type: ignore [arg-type]


def test_writes_are_queued_and_go_in_the_next_flush(backend, settings, alice, redis_calls):
    configure(settings, FLUSH_INTERVAL=10)  # no flush but the test's
    whos_online.enter(CHAT, user=alice, connection="1")
    whos_online.enter(CHAT, user=alice, connection="2")
    whos_online.enter("chat:other", address=ADDRESS, connection="3")
    assert redis_calls.trips == []

    assert whos_online.flush()
    assert redis_calls.trips == [["EVALSHA"]]
    assert names(CHAT) == ["alice"]
    assert guests_in("chat:other") == 1


# Signals


class Heard:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str]] = []

    def on(self, name: str) -> Any:
        def heard(sender: object, **kwargs: Any) -> None:
            self.calls.append((name, kwargs["member"], kwargs.get("room", "")))

        return heard

    def wait_for(self, count: int) -> list[tuple[str, str, str]]:
        deadline = time.monotonic() + 10
        while len(self.calls) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.1)  # and nothing more after them
        calls, self.calls = self.calls, []
        return calls


@pytest.fixture
def heard() -> Iterator[Heard]:
    found = Heard()
    signals = {"came_online": came_online, "entered_room": entered_room, "left_room": left_room}
    for name, signal in signals.items():
        signal.connect(found.on(name), weak=False, dispatch_uid=f"tests.links.{name}")
    yield found
    for name, signal in signals.items():
        signal.disconnect(dispatch_uid=f"tests.links.{name}")


def test_signals_tell_the_first_connection_in_and_the_last_one_out(backend, heard, alice):
    me = str(alice.pk)
    whos_online.enter(CHAT, user=alice, connection="1")
    assert heard.wait_for(2) == [("came_online", me, ""), ("entered_room", me, CHAT)]

    whos_online.enter(CHAT, user=alice, connection="2")
    whos_online.enter(CHAT, user=alice, connection="1")  # a renewal
    whos_online.leave(CHAT, user=alice, connection="1")
    assert heard.wait_for(1) == []

    whos_online.leave(CHAT, user=alice, connection="2")
    assert heard.wait_for(1) == [("left_room", me, CHAT)]


def test_signals_of_a_page_room_and_a_connection_room_are_apart(backend, heard, alice):
    me = str(alice.pk)
    page_view(alice, "page:a")
    whos_online.enter(CHAT, user=alice, connection="1")
    assert heard.wait_for(3)[1:] == [("entered_room", me, "page:a"), ("entered_room", me, CHAT)]

    page_view(alice, CHAT)  # in it already
    page_view(alice, "page:b")  # still in it
    assert heard.wait_for(2) == [("left_room", me, "page:a"), ("entered_room", me, "page:b")]

    whos_online.leave(CHAT, user=alice, connection="1")
    assert heard.wait_for(1) == [("left_room", me, CHAT)]


def test_a_hidden_user_is_told_as_hidden_as_they_enter_and_leave(backend, hiding_bob, bob):
    told: list[tuple[str, str]] = []

    def heard(sender: object, **kwargs: Any) -> None:
        told.append((kwargs["kind"], kwargs.get("room", "")))

    for signal in (entered_room, left_room):
        signal.connect(heard, weak=False, dispatch_uid="tests.links.hidden")
    try:
        whos_online.enter(CHAT, user=bob, connection="1")
        whos_online.leave(CHAT, user=bob, connection="1")
        deadline = time.monotonic() + 10
        while len(told) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
    finally:
        for signal in (entered_room, left_room):
            signal.disconnect(dispatch_uid="tests.links.hidden")

    assert told == [("hidden", CHAT), ("hidden", CHAT)]


def test_a_guest_s_signals_name_their_pseudonym(backend, heard, db):
    whos_online.enter(CHAT, address=ADDRESS, connection="1")
    me = guest_id(ADDRESS, get_config(), time.time())

    assert heard.wait_for(2) == [("came_online", me, ""), ("entered_room", me, CHAT)]


def test_the_api_lists_the_connection_functions():
    for name in ("enter", "leave", "aenter", "aleave"):
        assert getattr(whos_online, name) is getattr(api, name)


def test_a_renewal_is_a_write_of_the_same_member(backend, r: redis.Redis, alice):
    whos_online.enter(CHAT, user=alice, connection="1", now=time.time() - 30)
    whos_online.enter(CHAT, user=alice, connection="1")

    assert r.zcard(f"{{whos_online}}:links:u:{alice.pk}") == 1


def commands_run(r: redis.Redis, write: Any) -> dict[str, int]:
    """The commands Redis ran for ``write()`` (its scripts' own, by INFO commandstats)."""
    r.config_resetstat()
    write()
    found = {
        name.removeprefix("cmdstat_"): int(stat["calls"])
        for name, stat in r.info("commandstats").items()
    }
    return {name: calls for name, calls in found.items() if name not in {"evalsha", "config"}}


def test_page_views_of_people_without_connections_cost_one_read_per_move(
    real_redis_url, settings, db
):
    configure(settings, REDIS_URL=real_redis_url)
    r = redis.Redis.from_url(real_redis_url)
    now = time.time()
    whos_online.record_guest(ADDRESS, room="page:a", now=now)

    stays = commands_run(r, lambda: whos_online.record_guest(ADDRESS, room="page:a", now=now + 1))
    moves = commands_run(r, lambda: whos_online.record_guest(ADDRESS, room="page:b", now=now + 2))

    assert "zrange" not in stays  # staying in a room looks for no connection
    assert moves["zrange"] == 1  # a move reads the person's connections (none: no key)


def test_a_full_queue_says_it_could_not_keep_the_connection(backend, monkeypatch, alice):
    monkeypatch.setattr(flusher.current(), "put", lambda item: False)

    assert whos_online.enter(CHAT, user=alice, connection="1") is False
    assert names(CHAT) == []
