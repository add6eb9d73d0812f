"""SNAPSHOT_MAX_AGE: the tags and the JSON view show the process's last snapshot for a while."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

import whos_online
from tests.support.helpers import BreakerClock, configure, render, widget_text
from whos_online.config.settings import get_config
from whos_online.reading import snapshots, viewer
from whos_online.recording import throttle

TAG = "{% load whos_online %}{% whos_online %}"


@pytest.fixture
def clock(monkeypatch) -> BreakerClock:
    """The kept snapshot's age passes when the test says; Unix time is ``time.time``, looked up
    at each call so that a test may set it too."""
    clock = BreakerClock()

    def unix_time() -> float:
        return time.time()

    monkeypatch.setattr(snapshots, "time", SimpleNamespace(monotonic=clock, time=unix_time))
    return clock


@pytest.fixture
def kept(settings, backend) -> None:
    configure(settings, SNAPSHOT_MAX_AGE=2)


def test_renders_within_the_max_age_read_redis_once(kept, clock, redis_calls, alice, r):
    whos_online.record_user(alice)
    render(TAG)
    r.zadd("{whos_online}:guests", {"someone": 9_999_999_999})  # another process's visit
    redis_calls.clear()

    assert widget_text(render(TAG)) == "Who's online: alice"
    clock.advance(1.9)
    assert widget_text(render(TAG)) == "Who's online: alice"
    assert redis_calls.trips == []

    clock.advance(0.1)
    assert widget_text(render(TAG)) == "Who's online: alice and 1 guest"
    assert redis_calls.trips == [["EVALSHA"]]


def test_a_browser_recorded_after_the_kept_snapshot_was_read_gets_a_fresh_one(
    kept, clock, client, alice, *, redis_calls, monkeypatch
):
    whos_online.record_user(alice)
    render(TAG)  # kept: alice alone
    read_at = snapshots.cache_of("")._kept[1].read_at  # type: ignore [index]
    wall = [read_at + 1.5]
    monkeypatch.setattr(time, "time", lambda: wall[0])
    client.get("/plain/")  # this browser is recorded in the second after the read
    wall[0] = read_at + 2.7
    redis_calls.clear()

    assert "alice and 1 guest" in widget_text(client.get("/").content.decode())
    assert redis_calls.trips == [["EVALSHA"]]
    # Anybody else's page uses what that read kept; this browser's own pages look for it in a
    # read of their own until its visit is surely written (viewer.doubt), then use it too.
    wall[0] = read_at + 2.8
    assert widget_text(render(TAG)) == "Who's online: alice and 1 guest"
    assert redis_calls.trips == [["EVALSHA"]]
    assert "alice and 1 guest" in widget_text(client.get("/").content.decode())
    assert redis_calls.trips == [["EVALSHA"], ["EVALSHA"]]
    wall[0] = int(read_at + 1.5) + viewer.doubt(get_config())
    clock.advance(0.5)
    assert "alice and 1 guest" in widget_text(client.get("/").content.decode())
    assert redis_calls.trips == [["EVALSHA"], ["EVALSHA"]]


def test_a_new_visitor_reloading_within_the_second_of_their_visit_sees_themselves(
    kept, clock, client, alice, *, redis_calls, monkeypatch
):
    """The first page of a new visitor is rendered before their visit is written, from a read
    that this process then keeps: their reload must not be shown it."""
    whos_online.record_user(alice)
    second = int(time.time()) + 10
    wall = [second + 0.1]
    monkeypatch.setattr(time, "time", lambda: wall[0])
    assert "Who's online: alice" in widget_text(client.get("/").content.decode())
    wall[0] = second + 0.6
    redis_calls.clear()

    assert "alice and 1 guest" in widget_text(client.get("/").content.decode())
    assert redis_calls.trips == [["EVALSHA"]]
    # What that read kept serves everybody else; the newcomer's own pages look for them until
    # their visit is surely written.
    wall[0] = second + 1.2
    assert "alice and 1 guest" in widget_text(client.get("/").content.decode())
    assert widget_text(render(TAG)) == "Who's online: alice and 1 guest"
    assert redis_calls.trips == [["EVALSHA"], ["EVALSHA"]]


def test_a_visit_recorded_does_not_drop_the_kept_snapshot_for_others(
    kept, clock, redis_calls, alice, bob
):
    """Every process records visits all the time on a busy site: dropping the kept snapshot on
    each would make nearly every render read Redis again."""
    whos_online.record_user(alice)
    render(TAG)
    redis_calls.clear()
    whos_online.record_user(bob)
    assert widget_text(render(TAG)) == "Who's online: alice"
    assert redis_calls.trips == [["EVALSHA"]]  # bob's visit, no read


def test_a_logout_this_process_makes_the_next_render_fresh(kept, clock, client, alice):
    client.get(f"/login/{alice.username}/")
    assert widget_text(render(TAG)) == "Who's online: alice"
    client.get("/logout/")
    assert widget_text(render(TAG)) == "Who's online: 1 guest"


def test_a_snapshot_with_names_answers_a_read_of_counts(kept, clock, redis_calls, client, alice):
    whos_online.record_user(alice)
    render(TAG)
    redis_calls.clear()
    assert client.get("/online/counts.json").json()["users"] == 1
    assert redis_calls.trips == []


def test_a_snapshot_of_counts_does_not_answer_a_read_of_names(kept, clock, redis_calls, alice):
    whos_online.record_user(alice)
    snapshots.read(0, max_age=2)  # as the JSON view reads for those who may not see names
    redis_calls.clear()
    assert widget_text(render(TAG)) == "Who's online: alice"
    assert redis_calls.trips == [["EVALSHA"]]


def test_the_python_api_always_reads_afresh(kept, clock, alice, bob, r):
    whos_online.record_user(alice)
    render(TAG)
    r.zadd("{whos_online}:users", {str(bob.pk): 9_999_999_999})
    assert whos_online.online_counts().users == 2


def test_zero_reads_redis_for_every_render(settings, backend, redis_calls, alice):
    configure(settings, SNAPSHOT_MAX_AGE=0)
    whos_online.record_user(alice)
    redis_calls.clear()
    render(TAG)
    render(TAG)
    assert redis_calls.trips == [["EVALSHA"], ["EVALSHA"]]


def test_a_failed_read_is_not_kept(kept, clock, redis_down, alice):
    assert widget_text(render(TAG)) == "Who's online: nobody"
    assert snapshots.cache_of("").get(50, 2) is None


def test_only_a_visitor_who_was_not_online_gets_the_flag_for_a_fresh_read(
    kept, clock, client, monkeypatch, mid_utc_day
):
    """A browser with no genuine cookie is taken to be arriving; one whose cookie ran out (its
    visit still counts, for WINDOW) is online already. Neither needs Redis's word: the visit is
    only queued."""
    start = time.time()
    client.get("/plain/")  # a guest arrives
    assert throttle.arrived(client.cookies[throttle.COOKIE_NAME].value)
    monkeypatch.setattr(time, "time", lambda: start + get_config().throttle + 1)
    client.get("/plain/")  # the same guest, online already, recorded again
    assert not throttle.arrived(client.cookies[throttle.COOKIE_NAME].value)


def test_a_visitor_online_already_is_shown_the_kept_snapshot(
    kept, clock, client, *, redis_calls, monkeypatch
):
    client.get("/plain/")
    render(TAG)  # kept, with the guest counted
    read_at = snapshots.cache_of("")._kept[1].read_at  # type: ignore [index]
    wall = [read_at + get_config().throttle + 1]  # the throttle cookie has run out
    monkeypatch.setattr(time, "time", lambda: wall[0])
    render(TAG)  # kept again, the guest still counted
    read_at = wall[0]
    wall[0] = read_at + 1.5
    client.get("/plain/")  # recorded again after the read, but online already
    wall[0] = read_at + 2.7
    redis_calls.clear()
    assert "1 guest" in widget_text(client.get("/").content.decode())
    assert redis_calls.trips == []


def test_a_forged_flag_costs_reads_only_while_its_visit_is_recent(
    kept, clock, client, *, redis_calls, monkeypatch
):
    """The flag is not signed, but the second it names is: a browser that adds it has its own
    pages read afresh only while a genuine arrival's would be (``viewer.doubt``)."""
    second = int(time.time()) + 10
    wall = [second + 0.5]
    monkeypatch.setattr(time, "time", lambda: wall[0])
    client.get("/plain/")
    cookie = client.cookies[throttle.COOKIE_NAME].value.removesuffix(throttle.ARRIVED_SUFFIX)
    client.cookies[throttle.COOKIE_NAME] = cookie + throttle.ARRIVED_SUFFIX
    render(TAG)  # kept
    redis_calls.clear()
    wall[0] = second + viewer.doubt(get_config())
    for _ in range(3):
        client.get("/")
    assert redis_calls.trips == []


def test_a_room_and_the_site_are_read_in_one_round_trip(backend, redis_calls, alice, bob):
    whos_online.record_user(alice, room="topic:1")
    whos_online.record_user(bob)
    redis_calls.clear()

    found = snapshots.read_many(10, ["topic:1", ""])

    assert redis_calls.trips == [["EVALSHA", "EVALSHA"]]
    room, site = found["topic:1"], found[""]
    assert room is not None
    assert site is not None
    assert [user.pk for user in room.users] == [alice.pk]
    assert [user.pk for user in site.users] == [bob.pk, alice.pk]


def test_only_what_the_process_has_not_kept_is_read(kept, clock, redis_calls, alice):
    whos_online.record_user(alice, room="topic:1")
    snapshots.read(10, max_age=2)  # the site's, kept
    redis_calls.clear()

    found = snapshots.read_many(10, ["", "topic:1"], max_age=2)

    assert redis_calls.trips == [["EVALSHA"]]  # the room's alone
    assert all(one is not None and one.counts.users == 1 for one in found.values())
    redis_calls.clear()
    snapshots.read_many(10, ["topic:1", ""], max_age=2)
    assert redis_calls.trips == []


def test_rooms_that_cannot_be_read_are_none(redis_down):
    assert snapshots.read_many(10, ["topic:1", ""]) == {"topic:1": None, "": None}
