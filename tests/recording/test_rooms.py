"""Rooms: who is on one page, kept next to who is on the site."""

from __future__ import annotations

import html
import io
import re
import time
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth import get_user_model, login
from django.core.management import call_command
from django.http import HttpRequest, HttpResponse
from django.test import Client, RequestFactory
from django.urls import include, path, resolve

import whos_online
from tests.support.helpers import configure, flood_rooms, render, widget_text
from whos_online import apps
from whos_online.api import OnlineCounts
from whos_online.backend import keyspace
from whos_online.backend.clients import admin_client
from whos_online.config.settings import get_config
from whos_online.decorators import in_room
from whos_online.flushing import flusher as flushing
from whos_online.recording import requests, rooms, throttle
from whos_online.recording import visits as recording
from whos_online.recording.state import state_of
from whos_online.store import cleanup, epochs, snapshot
from whos_online.store.cleanup import RoomsPage, prune_chunk, prune_rooms_page

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

    from tests.support.helpers import RedisCalls
    from whos_online.store.items import Placement

pytestmark = pytest.mark.urls(__name__)

TOPIC_1 = "topic:1"
TOPIC_2 = "topic:2"


@in_room("topic:{pk}")
def topic(request: HttpRequest, pk: int) -> HttpResponse:
    return HttpResponse("topic")


def board(request: HttpRequest) -> HttpResponse:
    whos_online.set_room(request, "board")
    return HttpResponse("board")


def plain(request: HttpRequest) -> HttpResponse:
    return HttpResponse("plain")


def log_in(request: HttpRequest, username: str) -> HttpResponse:
    user = get_user_model().objects.get(username=username)
    login(request, user, backend="django.contrib.auth.backends.ModelBackend")
    return HttpResponse("in")


urlpatterns = [
    path("online/", include("whos_online.urls")),
    path("topics/<int:pk>/", topic),
    path("board/", board),
    path("plain/", plain, name="plain"),
    path("login/<str:username>/", log_in),
]


def counts(room: str | None = None) -> OnlineCounts:
    return whos_online.online_counts(room=room)


def counts_at(room: str, now: float) -> OnlineCounts:
    """A room's counts as the reader sees them at ``now`` (from its snapshot script)."""
    found = snapshot.snapshot(admin_client(), get_config(), limit=0, now=now, room=room)
    return found.counts


def cleanup_output() -> str:
    out = io.StringIO()
    call_command("whos_online_cleanup", stdout=out)
    return out.getvalue()


def hide_everyone(user: object) -> bool:
    return True


GUEST = OnlineCounts(users=0, guests=1, bots=0, total=1)
NOBODY = OnlineCounts(users=0, guests=0, bots=0, total=0)


def test_a_guest_is_in_one_room_at_a_time(backend):
    assert whos_online.record_guest("192.0.2.1", room=TOPIC_1) is True
    assert counts(TOPIC_1) == GUEST
    assert counts() == GUEST

    assert whos_online.record_guest("192.0.2.1", room=TOPIC_2) is True
    assert counts(TOPIC_1) == NOBODY
    assert counts(TOPIC_2) == GUEST

    assert whos_online.record_guest("192.0.2.1") is True  # a page without a room
    assert counts(TOPIC_2) == NOBODY
    assert counts() == GUEST  # still online on the site


def test_users_are_listed_in_their_room_with_the_site_s_rules(backend, hiding_bob, alice, bob):
    whos_online.record_user(alice, room=TOPIC_1)
    whos_online.record_user(bob, room=TOPIC_1)
    whos_online.record_guest("192.0.2.1", room=TOPIC_2)

    assert [user.name for user in whos_online.online_users(room=TOPIC_1)] == ["alice"]
    assert counts(TOPIC_1) == OnlineCounts(users=2, guests=0, bots=0, total=2)
    assert whos_online.online_users(room=TOPIC_2) == []


def test_a_login_takes_the_guest_out_of_their_room(backend, alice):
    client = Client(REMOTE_ADDR="192.0.2.9")
    client.get("/topics/1/")
    assert counts(TOPIC_1) == GUEST

    client.get(f"/login/{alice.username}/")  # recorded at once, in no room: the guest leaves
    assert counts(TOPIC_1) == NOBODY
    client.get("/topics/1/")
    assert counts(TOPIC_1) == OnlineCounts(users=1, guests=0, bots=0, total=1)


@pytest.mark.parametrize("name", ["", "x" * (rooms.MAX_ROOM_LENGTH + 1), 7, b"topic"])
def test_a_bad_room_name_is_a_value_error(backend, name):
    request = HttpRequest()
    with pytest.raises(ValueError, match="room name"):
        whos_online.set_room(request, name)
    with pytest.raises(ValueError, match="room name"):
        whos_online.online_counts(room=name)
    with pytest.raises(ValueError, match="room name"):
        whos_online.record_guest("192.0.2.1", room="")


def test_the_longest_name_is_a_room(backend):
    name = "é" * rooms.MAX_ROOM_LENGTH
    assert whos_online.record_guest("192.0.2.1", room=name) is True
    assert counts(name) == GUEST


def test_staying_in_a_room_is_throttled_and_moving_is_recorded_at_once(
    backend, redis_calls: RedisCalls
):
    client = Client(REMOTE_ADDR="192.0.2.7")
    client.get("/topics/1/")
    cookie = client.cookies[throttle.COOKIE_NAME].value
    assert throttle.cookie_room(cookie) == rooms.room_tag(TOPIC_1)

    redis_calls.clear()
    client.get("/topics/1/")
    assert redis_calls.trips == []  # the same room: nothing to write

    client.get("/topics/2/")
    assert [trip[0] for trip in redis_calls.trips] == ["EVALSHA"]  # one round trip
    assert counts(TOPIC_1) == NOBODY
    assert counts(TOPIC_2) == GUEST

    client.get("/plain/")  # no room: out of topic 2, at once
    assert counts(TOPIC_2) == NOBODY
    assert throttle.cookie_room(client.cookies[throttle.COOKIE_NAME].value) == ""


def throttled_page_view(room: str, *, cookie_room: str = "") -> Placement | None:
    """What a page view of ``/plain/`` by a browser whose throttle cookie says it is in
    ``cookie_room`` comes to after its view: where it is written, or None for nothing."""
    now = time.time()
    request = RequestFactory().get("/plain/", HTTP_SEC_FETCH_DEST="document")
    request.resolver_match = resolve("/plain/")
    state = state_of(request)
    state.cookie = throttle.ThrottleCookie(int(now) + 60, cookie_room, arrived=False)
    if room == "set by the view":
        whos_online.set_room(request, TOPIC_1)
    elif room == "announced":
        rooms.announce_page_view(request, TOPIC_1)
    return requests.after_view(
        state, HttpResponse("page"), get_config(), now, requests.Decision.THROTTLED
    )


@pytest.mark.parametrize("room", ["ROOMS", "set by the view", "announced"])
def test_a_throttled_page_view_into_a_room_is_written_however_the_room_is_named(
    backend, settings, room
):
    if room == "ROOMS":
        configure(settings, ROOMS={"plain": TOPIC_1})

    placement = throttled_page_view(room)

    assert placement is not None
    assert placement.room == TOPIC_1


def test_a_throttled_page_view_on_a_site_without_rooms_counts_its_hit(backend, settings):
    configure(settings, COUNT_HITS=True)

    assert throttled_page_view("none") is None  # nobody moved

    whos_online.flush()  # the hit waits in the process for its flush
    assert sum(count for _, count in whos_online.get_counter("hits", 86400)) == 1


def test_a_throttled_page_view_on_a_site_without_rooms_writes_nothing_after_its_view(backend):
    assert throttled_page_view("none") is None
    # A cookie handed out where the room was not known: the next page view says where they are.
    placement = throttled_page_view("none", cookie_room=throttle.UNKNOWN_ROOM)
    assert placement is not None
    assert placement.room == ""


def test_a_site_without_rooms_sends_no_room_mark(backend):
    client = Client(REMOTE_ADDR="192.0.2.8")
    client.get("/plain/")
    cookie = client.cookies[throttle.COOKIE_NAME].value.removesuffix(throttle.ARRIVED_SUFFIX)
    # EXPIRY.MAC.eEPOCH, and no room mark: a part of its own, after the MAC (which, random,
    # may itself begin with the mark's letter).
    expiry, mac, last = cookie.split(".")
    epoch = epochs.current().of(keyspace.layout(get_config())[0])
    assert last == f"e{epoch}"
    assert (len(expiry), len(mac)) == (10, 22)


def test_set_room_in_a_view(backend):
    Client(REMOTE_ADDR="192.0.2.6").get("/board/")
    assert counts("board") == GUEST


def test_a_forged_room_tag_is_no_cookie(backend):
    client = Client(REMOTE_ADDR="192.0.2.5")
    client.get("/topics/1/")
    genuine = client.cookies[throttle.COOKIE_NAME].value
    forged = genuine.replace(rooms.room_tag(TOPIC_1), rooms.room_tag(TOPIC_2))
    binding = throttle.binding("", "192.0.2.5")
    expiry = throttle.fresh_expiry(genuine, binding, 0, 10**10)
    assert expiry is not None
    assert throttle.fresh_expiry(forged, binding, 0, 10**10) is None


def test_a_cookie_less_client_s_page_views_are_written_on_a_site_with_rooms(
    backend, redis_calls: RedisCalls
):
    """Without a cookie to say where its browser is, only a write puts a client where its latest
    page is: another process may have moved it since this one remembered it."""
    for _ in range(2):
        Client(REMOTE_ADDR="192.0.2.4").get("/topics/1/")
    redis_calls.clear()
    Client(REMOTE_ADDR="192.0.2.4").get("/topics/1/")
    assert redis_calls.commands == ["EVALSHA"]
    Client(REMOTE_ADDR="192.0.2.4").get("/topics/2/")
    assert counts(TOPIC_2) == GUEST
    assert counts(TOPIC_1) == NOBODY


def test_a_user_who_becomes_hidden_leaves_the_room_s_visible_set(
    backend, settings, alice: AbstractUser
):
    whos_online.record_user(alice, room=TOPIC_1)
    configure(settings, HIDE_USER="tests.recording.test_rooms.hide_everyone")
    whos_online.record_user(alice, room=TOPIC_1)
    assert whos_online.online_users(room=TOPIC_1) == []
    assert counts(TOPIC_1) == OnlineCounts(users=1, guests=0, bots=0, total=1)


def test_a_hidden_user_who_moves_leaves_the_hidden_set_of_the_room_they_left(
    backend, r, settings, alice: AbstractUser
):
    configure(settings, HIDE_USER="tests.recording.test_rooms.hide_everyone")
    whos_online.record_user(alice, room=TOPIC_1)
    whos_online.record_user(alice, room=TOPIC_2)
    assert r.zscore(f"{{whos_online}}:room:{TOPIC_1}:hidden", str(alice.pk)) is None
    assert counts(TOPIC_2) == OnlineCounts(users=1, guests=0, bots=0, total=1)

    configure(settings, HIDE_USER=None)  # visible again, in the same room
    whos_online.record_user(alice, room=TOPIC_2)
    assert r.zscore(f"{{whos_online}}:room:{TOPIC_2}:hidden", str(alice.pk)) is None
    assert [user.pk for user in whos_online.online_users(room=TOPIC_2)] == [alice.pk]
    assert r.exists("{whos_online}:hidden") == 0


def test_a_user_visible_again_before_the_rooms_are_pruned_is_in_one_room(
    backend, r, settings, alice: AbstractUser
):
    """The cleanup prunes the shard's sets before the rooms: a hidden user gone stale, pruned
    from the hidden set but not yet from the room's, comes back visible in that room."""
    configure(settings, HIDE_USER="tests.recording.test_rooms.hide_everyone")
    long_ago = time.time() - get_config().window - 60
    whos_online.record_user(alice, room=TOPIC_1, now=long_ago)
    prune_chunk(admin_client(), get_config(), "hidden", now=time.time())
    assert r.exists("{whos_online}:hidden") == 0
    configure(settings, HIDE_USER=None)
    whos_online.record_user(alice, room=TOPIC_1)
    cleanup.prune_rooms(admin_client(), get_config(), now=time.time())

    whos_online.record_user(alice, room=TOPIC_2)

    assert [user.pk for user in whos_online.online_users(room=TOPIC_2)] == [alice.pk]
    assert whos_online.online_users(room=TOPIC_1) == []


def test_the_index_of_rooms_holds_the_latest_visit_of_a_batch_in_each_room(backend, r, settings):
    configure(settings, FLUSH_INTERVAL=10)
    now = time.time()
    for member, at in (("a", now - 10), ("b", now), ("c", now - 5)):
        flushing.current().put(recording.member_visit("guests", member, at, room=TOPIC_1))
    flushing.current().put(recording.member_visit("guests", "d", now - 7, room=TOPIC_2))

    assert whos_online.flush() is True

    assert r.zscore("{whos_online}:rooms", TOPIC_1) == pytest.approx(now, abs=0.001)
    assert r.zscore("{whos_online}:rooms", TOPIC_2) == pytest.approx(now - 7, abs=0.001)
    assert counts(TOPIC_1).guests == 3
    assert whos_online.unique_visitors() == 4


# The cleanup


def room_keys(r) -> list[str]:
    return sorted(key.decode() for key in r.scan_iter(match="*room*"))


def test_the_cleanup_empties_rooms_and_leaves_no_key_of_them(backend, r):
    now = time.time()
    window = get_config().window
    whos_online.record_guest("192.0.2.1", room=TOPIC_1, now=now - window - 5)
    whos_online.record_guest("192.0.2.2", room=TOPIC_2, now=now - window - 5)
    whos_online.record_guest("192.0.2.3", room=TOPIC_2, now=now - 5)

    assert "Rooms: took 2 people out, and deleted 1 room that had nobody left." in cleanup_output()

    assert counts_at(TOPIC_2, now) == GUEST
    assert room_keys(r) == [
        "{whos_online}:room:topic:2:guests",
        "{whos_online}:rooms",
        "{whos_online}:rooms:where",
    ]
    assert [room.decode() for room in r.zrange("{whos_online}:rooms", 0, -1)] == [TOPIC_2]
    assert r.hlen("{whos_online}:rooms:where") == 1

    whos_online.prune(now=now + window + 1)  # everyone gone: nothing of the rooms is left
    assert room_keys(r) == []


def test_rooms_are_pruned_in_chunks(backend, r, monkeypatch):
    monkeypatch.setattr(cleanup, "PRUNE_CHUNK_SIZE", 3)
    now = 1_800_000_000.0
    for number in range(7):
        whos_online.record_guest(f"192.0.2.{number}", room=TOPIC_1, now=now - 700)
    removed, emptied = cleanup.prune_rooms(admin_client(), get_config(), now=now)
    assert (removed, emptied) == (7, 1)
    assert room_keys(r) == []


def test_someone_back_in_a_room_during_the_cleanup_stays(backend, r):
    now = 1_800_000_000.0
    whos_online.record_guest("192.0.2.1", room=TOPIC_1, now=now - 700)
    whos_online.record_guest("192.0.2.1", room=TOPIC_1, now=now)  # came back
    cleanup.prune_rooms(admin_client(), get_config(), now=now)
    assert counts_at(TOPIC_1, now) == GUEST


def index_of_rooms(r) -> list[str]:
    return sorted(room.decode() for room in r.zrange("{whos_online}:rooms", 0, -1))


def test_a_flood_of_empty_rooms_is_pruned_a_page_per_call(backend, r, monkeypatch, redis_calls):
    monkeypatch.setattr(cleanup, "ROOMS_PAGE_SIZE", 100)
    now = 1_800_000_000.0
    whos_online.record_guest("192.0.2.1", room=TOPIC_1, now=now)
    flood_rooms(r, 2000, at=now - 700)
    redis_calls.clear()

    assert cleanup.prune_rooms(admin_client(), get_config(), now=now) == (0, 2000)

    # About 2000 / 100 pages (ZSCAN's COUNT is a hint to a real server), not a call per room.
    trips = list(redis_calls.trips)
    assert 20 <= len(trips) <= 30
    assert set(map(tuple, trips)) == {("EVALSHA",)}
    assert index_of_rooms(r) == [TOPIC_1]
    assert counts_at(TOPIC_1, now) == GUEST


def test_a_page_stops_at_its_budget_of_members_and_the_next_call_goes_on(backend, r, monkeypatch):
    monkeypatch.setattr(cleanup, "PRUNE_CHUNK_SIZE", 3)
    now = 1_800_000_000.0
    for number in range(20):
        whos_online.record_guest(f"192.0.2.{number}", room=f"topic:{number % 5}", now=now - 700)
    whos_online.record_guest("192.0.2.99", room=TOPIC_1, now=now)
    calls: list[RoomsPage] = []
    prune_page = prune_rooms_page

    def counted(*args: Any, **kwargs: Any) -> RoomsPage:
        calls.append(prune_page(*args, **kwargs))
        return calls[-1]

    monkeypatch.setattr(cleanup, "prune_rooms_page", counted)

    assert cleanup.prune_rooms(admin_client(), get_config(), now=now) == (20, 4)

    assert all(page.removed <= 3 for page in calls)
    assert len(calls) >= 7
    assert index_of_rooms(r) == [TOPIC_1]
    assert room_keys(r) == [
        "{whos_online}:room:topic:1:guests",
        "{whos_online}:rooms",
        "{whos_online}:rooms:where",
    ]
    assert r.hlen("{whos_online}:rooms:where") == 1


def test_the_where_hash_keeps_a_person_another_room_holds(backend, r):
    """A stale member left in one room's set while the HASH puts them in another room: the
    cleanup empties the first room and leaves the HASH as it is."""
    now = 1_800_000_000.0
    whos_online.record_guest("192.0.2.1", room=TOPIC_2, now=now)
    member = r.zrange("{whos_online}:room:topic:2:guests", 0, -1)[0]
    r.zadd("{whos_online}:room:topic:1:guests", {member: now - 700})
    r.zadd("{whos_online}:rooms", {TOPIC_1: now - 700})

    assert cleanup.prune_rooms(admin_client(), get_config(), now=now) == (1, 1)

    assert index_of_rooms(r) == [TOPIC_2]
    assert r.hvals("{whos_online}:rooms:where") == [TOPIC_2.encode()]
    assert counts_at(TOPIC_2, now) == GUEST


def test_someone_back_between_two_pages_stays(backend, r, monkeypatch):
    monkeypatch.setattr(cleanup, "ROOMS_PAGE_SIZE", 10)
    now = 1_800_000_000.0
    # More rooms than Redis keeps in its compact encoding, which ZSCAN reads whole.
    for number in range(300):
        address = f"192.0.{number // 250}.{number % 250}"
        whos_online.record_guest(address, room=f"flood:{number}", now=now - 700)
    prune_page = prune_rooms_page

    def and_everyone_back(*args: Any, **kwargs: Any) -> RoomsPage:
        page = prune_page(*args, **kwargs)
        if args[3] == "0":  # after the first page, the guests left are seen again
            for number in range(300):
                if r.exists(f"{{whos_online}}:room:flood:{number}:guests"):
                    address = f"192.0.{number // 250}.{number % 250}"
                    whos_online.record_guest(address, room=f"flood:{number}", now=now)
        return page

    monkeypatch.setattr(cleanup, "prune_rooms_page", and_everyone_back)

    removed, emptied = cleanup.prune_rooms(admin_client(), get_config(), now=now)

    assert 0 < removed == emptied < 300
    # Each room left holds its guest, seen again: its set, its entry in the index and the HASH.
    assert len(index_of_rooms(r)) == 300 - emptied
    assert len(room_keys(r)) == 300 - emptied + 2
    assert r.hlen("{whos_online}:rooms:where") == 300 - removed


def test_a_room_read_is_one_round_trip_however_many_rooms_there_are(
    backend, redis_calls: RedisCalls
):
    for number in range(50):
        whos_online.record_guest(f"192.0.2.{number}", room=f"topic:{number}")
    redis_calls.clear()
    assert counts("topic:7") == GUEST
    assert redis_calls.trips == [["EVALSHA"]]


# Tags, the JSON view and the live widget


def test_the_tags_show_a_room(backend, settings, alice, bob):
    configure(settings, SHOW_NAMES_TO="everyone")
    whos_online.record_user(alice, room=TOPIC_1)
    whos_online.record_user(bob, room=TOPIC_2)
    whos_online.record_guest("192.0.2.1", room=TOPIC_1)

    markup = render('{% load whos_online %}{% whos_online room="topic:1" %}')
    assert widget_text(markup, peak=True) == "Here now: alice and 1 guest"
    assert render('{% load whos_online %}{% online_count room="topic:1" %}') == "2"
    assert render('{% load whos_online %}{% online_count "users" room=r %}', {"r": TOPIC_2}) == "1"
    stored = "{% load whos_online %}{% online_count room=r as reading %}({{ reading }} reading)"
    assert render(stored, {"r": TOPIC_1}) == "(2 reading)"
    site = render("{% load whos_online %}{% whos_online %}")
    assert widget_text(site).startswith("Who's online: bob, alice and 1 guest")


def test_the_json_view_answers_for_a_room(backend, settings, alice):
    configure(settings, SHOW_NAMES_TO="everyone")
    whos_online.record_user(alice, room=TOPIC_1)
    whos_online.record_guest("192.0.2.1")

    token = whos_online.room_token(TOPIC_1)
    document = Client().get("/online/counts.json", {"room": TOPIC_1, "token": token}).json()
    assert document["room"] == TOPIC_1
    assert (document["users"], document["guests"], document["total"]) == (1, 0, 1)
    assert [user["name"] for user in document["names"]] == ["alice"]
    assert Client().get("/online/counts.json").json()["total"] == 2


@pytest.mark.parametrize("room", ["", "x" * (rooms.MAX_ROOM_LENGTH + 1)])
def test_a_bad_room_is_a_bad_request(backend, room):
    assert Client().get("/online/counts.json", {"room": room}).status_code == 400
    assert Client().get("/online/widget/", {"room": room}).status_code == 400


def test_the_live_widget_of_a_room_refreshes_that_room(backend, settings, alice):
    configure(settings, SHOW_NAMES_TO="everyone")
    markup = render('{% load whos_online %}{% whos_online live=True room="topic:1" %}')
    url = re.search(r'data-whos-online-live="([^"]+)"', markup)
    assert url is not None
    assert "room=topic%3A1" in html.unescape(url.group(1))

    whos_online.record_user(alice, room=TOPIC_1)
    refreshed = Client().get(html.unescape(url.group(1)))
    assert widget_text(refreshed.content.decode()) == "Here now: alice"


def test_a_logout_and_an_erasure_take_the_user_out_of_their_room(backend, r, alice, bob):
    whos_online.record_user(alice, room=TOPIC_1)
    whos_online.record_user(bob, room=TOPIC_1)

    apps.remove_logout(None, None, alice)
    assert [user.name for user in whos_online.online_users(room=TOPIC_1)] == ["bob"]

    assert whos_online.forget_user(bob) is True
    assert counts(TOPIC_1) == NOBODY
    assert r.hlen("{whos_online}:rooms:where") == 0
