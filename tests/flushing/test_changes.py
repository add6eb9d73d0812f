"""What flushes changed, told off the request path: a signal per change, sent from the flushing
thread, and at most one message a second per process on Redis for the live streams."""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING, Any

import pytest
import redis

import whos_online
from tests.support.helpers import GUEST_IP, client_of, configure, guest, single_redis
from whos_online import api
from whos_online.backend import keyspace
from whos_online.config.settings import get_config
from whos_online.flushing import changes, flusher
from whos_online.signals import came_online, entered_room, left_room, went_offline
from whos_online.store import scripts

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from django.dispatch import Signal

TOPIC = "/topics/1/"


class Heard:
    """Every signal of whos_online's flushes, as (signal name, kind, member, room, thread)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, str, str, str]] = []
        self.arguments: list[dict[str, Any]] = []

    def receiver(self, name: str) -> Callable[..., None]:
        def heard(sender: object, **kwargs: Any) -> None:
            self.arguments.append(kwargs)
            self.calls.append(
                (
                    name,
                    kwargs["kind"],
                    kwargs["member"],
                    kwargs.get("room", ""),
                    threading.current_thread().name,
                )
            )

        return heard

    def wait_for(self, count: int) -> list[tuple[str, str, str, str, str]]:
        deadline = time.monotonic() + 10
        while len(self.calls) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.05)  # and nothing more after them
        return self.calls


SIGNALS: dict[str, Signal] = {
    "came_online": came_online,
    "entered_room": entered_room,
    "left_room": left_room,
}


@pytest.fixture
def heard() -> Iterator[Heard]:
    found = Heard()
    for name, signal in SIGNALS.items():
        signal.connect(found.receiver(name), weak=False, dispatch_uid=f"tests.{name}")
    yield found
    for name, signal in SIGNALS.items():
        signal.disconnect(dispatch_uid=f"tests.{name}")


FLUSHER = "whos_online flusher"


def test_a_guest_comes_online_enters_a_room_and_moves_on_told_from_the_flushing_thread(
    backend, heard
):
    browser = client_of()
    me = guest(GUEST_IP)
    browser.get(TOPIC)

    assert heard.wait_for(2) == [
        ("came_online", "guests", me, "", FLUSHER),
        ("entered_room", "guests", me, "topic:1", FLUSHER),
    ]
    browser.get("/topics/2/")
    browser.get("/plain/")

    assert heard.wait_for(5)[2:] == [
        ("left_room", "guests", me, "topic:1", FLUSHER),
        ("entered_room", "guests", me, "topic:2", FLUSHER),
        ("left_room", "guests", me, "topic:2", FLUSHER),
    ]
    assert heard.arguments[0]["user_id"] is None
    assert abs(heard.arguments[0]["at"].timestamp() - time.time()) < 60


def test_a_user_is_told_by_their_primary_key_and_a_visit_that_changes_nothing_is_not(
    backend, heard, alice
):
    whos_online.record_user(alice, room="topic:1")
    heard.wait_for(2)
    whos_online.record_user(alice, room="topic:1")
    time.sleep(0.2)

    assert [call[:4] for call in heard.wait_for(2)] == [
        ("came_online", "users", str(alice.pk), ""),
        ("entered_room", "users", str(alice.pk), "topic:1"),
    ]
    assert heard.arguments[0]["user_id"] == alice.pk


def test_a_hidden_user_is_told_as_hidden(backend, heard, hiding_bob, bob):
    whos_online.record_user(bob, room="topic:1")

    assert [call[:2] for call in heard.wait_for(2)] == [
        ("came_online", "hidden"),
        ("entered_room", "hidden"),
    ]


def test_a_write_that_failed_is_told_once_it_is_written(backend, heard, settings, monkeypatch):
    configure(settings, FLUSH_INTERVAL=10, FAILURE_BACKOFF=0)
    run = scripts.run

    def refused(*args: Any, **kwargs: Any) -> Any:
        raise ConnectionError("down")

    monkeypatch.setattr(scripts, "run", refused)
    whos_online.record_guest("198.51.100.1", room="topic:1")
    assert whos_online.flush() is False
    monkeypatch.setattr(scripts, "run", run)
    assert whos_online.flush() is True
    assert whos_online.flush() is True  # nothing more

    assert [call[0] for call in heard.wait_for(2)] == ["came_online", "entered_room"]


def test_a_receiver_that_fails_is_logged_and_the_others_still_hear(backend, heard, caplog):
    def broken(**kwargs: Any) -> None:
        raise RuntimeError("the site's bug")

    came_online.connect(broken, weak=False, dispatch_uid="tests.broken")
    try:
        whos_online.record_guest("198.51.100.1")
        assert heard.wait_for(1)[0][0] == "came_online"
    finally:
        came_online.disconnect(dispatch_uid="tests.broken")
    assert "A receiver of whos_online's signals failed" in caplog.text


def test_the_cleanup_tells_who_went_offline_of_every_kind(backend, alice, mid_utc_day):
    found: list[dict[str, Any]] = []

    def heard(sender: object, **kwargs: Any) -> None:
        found.append(kwargs)

    went_offline.connect(heard, weak=False, dispatch_uid="tests.went_offline_all")
    try:
        long_ago = time.time() - 3600
        whos_online.record_user(alice, now=long_ago)
        whos_online.record_guest("198.51.100.1", now=long_ago)
        api.prune()
    finally:
        went_offline.disconnect(dispatch_uid="tests.went_offline_all")

    by_kind = {one["kind"]: one for one in found}
    assert by_kind["users"]["user_ids"] == [alice.pk]
    assert by_kind["guests"]["members"] == [guest("198.51.100.1")]
    assert by_kind["guests"]["user_ids"] == []


# Publishing


@pytest.fixture
def channel(backend, settings) -> Iterator[Callable[[], list[dict[str, Any]]]]:
    """The messages published on the changes channel (with LIVE_UPDATES on)."""
    configure(settings, LIVE_UPDATES=True)
    pubsub = single_redis().pubsub(ignore_subscribe_messages=True)  # type: ignore [no-untyped-call]
    pubsub.subscribe(keyspace.changes_channel(get_config()))

    def received(wait: float = 0.5) -> list[dict[str, Any]]:
        found = []
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            message = pubsub.get_message(timeout=0.05)
            if message is not None:
                found.append(json.loads(message["data"]))
        return found

    yield received
    pubsub.close()


def test_a_flush_that_changed_a_room_publishes_it_once(channel):
    whos_online.record_guest("198.51.100.1", room="topic:1")

    assert channel(1.5) == [{"rooms": ["topic:1"], "site": True}]


def test_changes_within_a_second_go_in_one_message(channel):
    whos_online.record_guest("198.51.100.1", room="topic:1")
    time.sleep(0.1)
    whos_online.record_guest("198.51.100.2", room="topic:2")
    whos_online.record_guest("198.51.100.3", room="topic:3")

    found = channel(2.5)

    assert found[0] == {"rooms": ["topic:1"], "site": True}
    assert found[1:] == [{"rooms": ["topic:2", "topic:3"], "site": True}]


def test_a_visit_that_changes_nothing_publishes_nothing(channel):
    whos_online.record_guest("198.51.100.1", room="topic:1")
    channel(1.2)

    whos_online.record_guest("198.51.100.1", room="topic:1")

    assert channel(1.2) == []


def test_a_closed_page_s_room_is_published_again_once_its_reader_no_longer_counts(channel):
    whos_online.record_guest("198.51.100.1", room="topic:1")
    channel(1.2)
    pending = flusher.current().changes
    left_at = time.time() - get_config().leave_grace + 1  # they count there one second more
    flusher.leave_room("guests", guest("198.51.100.1"), "topic:1", left_at)

    # At once (the pages may show it, or not yet), and again once they no longer count.
    assert channel(2.5) == [{"rooms": ["topic:1"], "site": False}] * 2
    assert not pending.holds()


def test_nothing_is_published_without_live_updates(backend, heard):
    pubsub = single_redis().pubsub(ignore_subscribe_messages=True)  # type: ignore [no-untyped-call]
    with pubsub:
        pubsub.subscribe(keyspace.changes_channel(get_config()))
        whos_online.record_guest("198.51.100.1", room="topic:1")
        heard.wait_for(2)
        time.sleep(0.2)
        assert pubsub.get_message(timeout=0.2) is None


def test_a_message_names_every_room_changed_up_to_a_bound():
    assert json.loads(changes.message({"b", "a"}, site=False)) == {
        "rooms": ["a", "b"],
        "site": False,
    }
    many = {f"room:{n}" for n in range(changes.MAX_ROOMS + 1)}
    assert json.loads(changes.message(many, site=False)) == {"all": True}


def test_the_publish_waits_out_the_second_and_says_when(monkeypatch, settings):
    configure(settings, LIVE_UPDATES=True)
    sent: list[tuple[set[str], bool]] = []

    def publish(config: object, rooms: set[str], *, site: bool) -> bool:
        sent.append((rooms, site))
        return True

    monkeypatch.setattr(changes, "publish", publish)
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    pending = changes.Pending()
    pending._rooms, pending._site = {"a"}, True

    assert pending.deliver(get_config(), None) is None
    pending._rooms = {"b"}
    clock[0] += 0.4
    assert pending.deliver(get_config(), None) == pytest.approx(0.6)
    assert pending.deliver(get_config(), None, at_once=True) is None

    assert sent == [({"a"}, True), ({"b"}, False)]


def test_a_publish_that_was_not_sent_is_tried_again_with_what_changed_since(monkeypatch, settings):
    """A timeout, or a breaker another call opened, need not have cut the streams' subscription:
    dropped, the change would wait for their next refresh (``REFRESH_INTERVAL``)."""
    configure(settings, LIVE_UPDATES=True)
    sent: list[tuple[set[str], bool]] = []
    answers = iter([False, True])

    def publish(config: object, rooms: set[str], *, site: bool) -> bool:
        sent.append((set(rooms), site))
        return next(answers)

    monkeypatch.setattr(changes, "publish", publish)
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    pending = changes.Pending()
    pending._rooms, pending._site = {"a"}, True

    assert pending.deliver(get_config(), None) == pytest.approx(changes.PUBLISH_EVERY)
    assert pending.holds()
    pending._rooms.add("b")
    clock[0] += changes.PUBLISH_EVERY
    assert pending.deliver(get_config(), None) is None

    assert sent == [({"a"}, True), ({"a", "b"}, True)]
    assert not pending.holds()


def test_a_publish_that_timed_out_reaches_the_streams_once_redis_answers(
    channel, settings, monkeypatch
):
    """The PUBLISH times out (its breaker opens for ``FAILURE_BACKOFF``) while the subscription
    stays up: the message still comes, once the breaker lets it through."""
    configure(settings, LIVE_UPDATES=True, FAILURE_BACKOFF=1)
    publish = redis.Redis.publish
    failures = [1]

    def timing_out(client: redis.Redis, channel: str, message: str) -> Any:
        if failures[0]:
            failures[0] -= 1
            raise redis.exceptions.TimeoutError("Timeout reading from socket")
        return publish(client, channel, message)

    monkeypatch.setattr(redis.Redis, "publish", timing_out)
    whos_online.record_guest("198.51.100.1", room="topic:1")

    assert channel(4.0) == [{"rooms": ["topic:1"], "site": True}]
    assert failures == [0]


@pytest.mark.parametrize(
    ("error", "done_with"),
    [
        (redis.exceptions.NoPermissionError("NOPERM no permissions to access a channel"), True),
        (redis.exceptions.ResponseError("ERR unknown command 'PUBLISH'"), True),
        (redis.exceptions.TimeoutError("Timeout reading from socket"), False),
        (redis.exceptions.ConnectionError("Connection reset by peer"), False),
    ],
)
def test_a_publish_refused_for_good_is_done_with_and_one_that_failed_is_not(
    backend, settings, monkeypatch, error, done_with
):
    """An error reply would come at every try, and each would open the breaker anew: the
    message is dropped (the failure logged as any other). A timeout or a lost connection is
    tried again (``Pending.deliver``)."""
    configure(settings, LIVE_UPDATES=True)

    def failing(client: redis.Redis, channel: str, message: str) -> Any:
        raise error

    monkeypatch.setattr(redis.Redis, "publish", failing)

    assert changes.publish(get_config(), {"a"}, site=False) is done_with
