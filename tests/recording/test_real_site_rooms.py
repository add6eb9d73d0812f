"""Rooms on a site whose pages make requests of their own, whose views are an installed app's,
whose readers stay on one page for long, and which runs in several processes."""

from __future__ import annotations

import contextlib
import html
import re
import time
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth import get_user_model, login
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect
from django.template import TemplateSyntaxError, engines
from django.test import Client
from django.urls import include, path

import whos_online
from tests.support.helpers import client_of, configure, render, widget_text, widget_urls
from whos_online.api import OnlineCounts
from whos_online.backend.clients import admin_client
from whos_online.checks import check_room_urls, check_settings
from whos_online.config.settings import get_config
from whos_online.reading import snapshots, viewer
from whos_online.recording import rooms, throttle, visits
from whos_online.recording import visits as recording
from whos_online.recording.throttle import RecentVisitors
from whos_online.store import snapshot

if TYPE_CHECKING:
    from collections.abc import Iterator

    from tests.support.helpers import RedisCalls

pytestmark = pytest.mark.urls(__name__)

TOPIC_1 = "topic:1"
TOPIC_2 = "topic:2"
TOPICS = (1, 2)
PAGE = engines["django"].from_string(
    "{% load whos_online %}<main>{{ title }}</main>{% whos_online here=True peak=False %}"
    "<p>count={% online_count here=True %}</p>"
)
LIVE_PAGE = engines["django"].from_string(
    "{% load whos_online %}<main>{{ title }}</main>{% whos_online live=True here=True %}"
)


# An installed app's views, as a site finds them: undecorated, under a namespace of their own.


def topic(request: HttpRequest, pk: int, slug: str = "") -> HttpResponse:
    if pk not in TOPICS:
        raise Http404("no such topic")
    return HttpResponse(PAGE.render({"title": f"topic {pk}"}, request))


def live_topic(request: HttpRequest, pk: int) -> HttpResponse:
    return HttpResponse(LIVE_PAGE.render({"title": f"topic {pk}"}, request))


def bookmark(request: HttpRequest, pk: int) -> JsonResponse:
    """What a topic page's own script posts right after it loads."""
    return JsonResponse({"bookmarked": pk})


def reply(request: HttpRequest, pk: int) -> HttpResponse:
    """A form's POST, answered by a redirect back to the topic."""
    return redirect(f"/forum/topic/{pk}/")


def index(request: HttpRequest) -> HttpResponse:
    return HttpResponse(PAGE.render({"title": "index"}, request))


BOTH_PAGE = engines["django"].from_string(
    "{% load whos_online %}<main>{{ title }}</main>{% whos_online here=True site=True peak=False %}"
)


def both(request: HttpRequest, pk: int) -> HttpResponse:
    """A page that shows its room and the site from one tag; in no room for pk 0."""
    if pk:
        whos_online.set_room(request, f"topic:{pk}")
    return HttpResponse(BOTH_PAGE.render({"title": f"both {pk}"}, request))


OVERVIEW = engines["django"].from_string(
    '{% load whos_online %}{% online_count room="topic:1" %}/{% online_count here=True %}'
)


def overview(request: HttpRequest) -> HttpResponse:
    """A page in no room that says how many read a topic."""
    return HttpResponse(OVERVIEW.render({}, request))


def pinned(request: HttpRequest, pk: int) -> HttpResponse:
    """A view of the site's own that names its room itself."""
    whos_online.set_room(request, "pinned")
    return HttpResponse(PAGE.render({"title": "pinned"}, request))


def log_in(request: HttpRequest, username: str) -> HttpResponse:
    login(request, get_user_model().objects.get(username=username))
    return HttpResponse("in")


forum_patterns = (
    [
        path("", index, name="index"),
        path("overview/", overview, name="overview"),
        path("topic/<int:pk>/", topic, name="topic"),
        path("topic/<int:pk>/<slug:slug>/", topic, name="topic"),
        path("live/<int:pk>/", live_topic, name="live"),
        path("bookmark/<int:pk>/", bookmark, name="bookmark"),
        path("reply/<int:pk>/", reply, name="reply"),
        path("pinned/<int:pk>/", pinned, name="pinned"),
        path("both/<int:pk>/", both, name="both"),
    ],
    "forum",
)

urlpatterns = [
    path("forum/", include(forum_patterns, namespace="forum")),
    path("online/", include("whos_online.urls")),
    path("login/<str:username>/", log_in),
]

ROOMS = {
    "forum:topic": "topic:{pk}",
    "forum:live": "topic:{pk}",
    "forum:pinned": "pinned:{pk}",
}
#: What a browser sends with a page it opens, and with a request a page's script makes.
PAGE_VIEW: dict[str, Any] = {"HTTP_SEC_FETCH_DEST": "document", "HTTP_SEC_FETCH_MODE": "navigate"}
FETCH: dict[str, Any] = {"HTTP_SEC_FETCH_DEST": "empty", "HTTP_SEC_FETCH_MODE": "cors"}
SAME_SITE: dict[str, Any] = {"HTTP_SEC_FETCH_SITE": "same-origin"}

GUEST = OnlineCounts(users=0, guests=1, bots=0, total=1)
NOBODY = OnlineCounts(users=0, guests=0, bots=0, total=0)


@pytest.fixture(autouse=True)
def _rooms_by_url(settings) -> None:
    configure(settings, ROOMS=ROOMS, SHOW_NAMES_TO="everyone")


@pytest.fixture(autouse=True)
def _away_from_midnight(mid_utc_day) -> None:
    """Readers here stay for minutes of the test's clock, which a guest's pseudonym must outlast:
    it changes at midnight UTC (a guest online across it counts twice until ``WINDOW`` passed)."""


def counts(room: str | None = None) -> OnlineCounts:
    return whos_online.online_counts(room=room)


def counts_at(room: str, now: float) -> OnlineCounts:
    found = snapshot.snapshot(admin_client(), get_config(), limit=0, now=now, room=room)
    return found.counts


def shown(response: Any) -> str:
    assert response.status_code == 200, response.status_code
    return widget_text(response.content.decode())


# Only page views move people between rooms


@pytest.mark.parametrize(
    ("method", "headers"),
    [
        ("post", FETCH),  # the browser says it is a script's request
        ("get", FETCH),
        ("post", {}),  # no Fetch Metadata (plain HTTP): a POST is no page view
        ("get", {"HTTP_X_REQUESTED_WITH": "XMLHttpRequest"}),
        ("get", {}),  # a GET answered with JSON
    ],
    ids=["fetch-post", "fetch-get", "post", "xhr-get", "json-get"],
)
def test_a_page_s_own_requests_leave_its_reader_in_the_room(backend, method, headers):
    reader = client_of()
    reader.get("/forum/topic/1/", **PAGE_VIEW)
    assert counts(TOPIC_1) == GUEST

    getattr(reader, method)("/forum/bookmark/1/", **headers)  # throttled: nothing written
    assert counts(TOPIC_1) == GUEST
    reader.cookies.pop(throttle.COOKIE_NAME)  # recorded again, as once its cookie ran out
    getattr(reader, method)("/forum/bookmark/1/", **headers)

    assert counts(TOPIC_1) == GUEST
    assert counts() == GUEST


#: What a browser sends with a page it fetches ahead of time, and its older spellings.
SPECULATIVE: dict[str, dict[str, Any]] = {
    "prefetch": {**PAGE_VIEW, "HTTP_SEC_PURPOSE": "prefetch"},
    "prerender": {**PAGE_VIEW, "HTTP_SEC_PURPOSE": "prefetch;prerender"},
    "purpose": {"HTTP_PURPOSE": "prefetch"},
    "x-moz": {"HTTP_X_MOZ": "prefetch"},
    "x-purpose": {"HTTP_X_PURPOSE": "preview"},
}


def hits() -> int:
    return sum(count for _, count in whos_online.get_counter("hits", 86400))


@pytest.mark.parametrize("cookie", ["kept", "dropped"])
@pytest.mark.parametrize(
    ("method", "headers"),
    [*(("get", headers) for headers in SPECULATIVE.values()), ("head", PAGE_VIEW), ("head", {})],
    ids=[*SPECULATIVE, "head", "head-without-fetch-metadata"],
)
def test_a_page_fetched_ahead_of_time_or_a_head_moves_nobody_and_counts_no_hit(
    backend, settings, method, headers, cookie
):
    configure(settings, COUNT_HITS=True)
    reader = client_of()
    reader.get("/forum/topic/1/", **PAGE_VIEW)
    if cookie == "dropped":
        reader.cookies.pop(throttle.COOKIE_NAME)  # recorded, as once its cookie ran out

    response = getattr(reader, method)("/forum/topic/2/", **headers)

    assert response.status_code == 200
    assert counts(TOPIC_1) == GUEST
    assert counts(TOPIC_2) == NOBODY
    assert counts() == GUEST
    assert hits() == 1
    if throttle.COOKIE_NAME in response.cookies:  # recorded: its cookie names no other room
        room = throttle.cookie_room(response.cookies[throttle.COOKIE_NAME].value)
        assert room in {rooms.room_tag(TOPIC_1), throttle.UNKNOWN_ROOM}


def test_a_page_fetched_ahead_of_time_keeps_a_newcomer_online_in_no_room(backend, settings):
    configure(settings, COUNT_HITS=True)

    client_of().get("/forum/topic/2/", **SPECULATIVE["prefetch"])

    assert counts() == GUEST
    assert counts(TOPIC_2) == NOBODY
    assert hits() == 0


@pytest.mark.parametrize("cookie", ["kept", "dropped"])
def test_a_prefetch_of_another_topic_neither_moves_the_reader_nor_spoils_her_leaving(
    backend, cookie
):
    """The issue's reader: she reads topic 1, whose page prefetches topic 2 (Chrome's
    speculation rules), then closes the tab. She was never in topic 2, and her leaving word
    from topic 1, checked against the room her cookie names, takes her out of it."""
    reader = client_of()
    _live, presence = widget_urls(reader.get("/forum/live/1/", **PAGE_VIEW).content.decode())
    if cookie == "dropped":
        reader.cookies.pop(throttle.COOKIE_NAME)  # her cookie ran out: the prefetch is recorded
    reader.get("/forum/topic/2/", **SPECULATIVE["prefetch"])
    assert counts(TOPIC_2) == NOBODY
    now = time.time()

    response = leave(reader, presence)

    assert response.status_code == 204
    assert response.cookies[throttle.COOKIE_NAME]["max-age"] == 0  # the word was taken
    assert counts_at(TOPIC_1, now + get_config().leave_grace + 1) == NOBODY
    assert counts_at(TOPIC_2, now + get_config().leave_grace + 1) == NOBODY
    assert counts() == GUEST  # still on the site


def test_a_page_s_own_request_keeps_its_reader_seen_in_the_room(backend, monkeypatch):
    reader = client_of()
    start = time.time()
    reader.get("/forum/topic/1/", **PAGE_VIEW)
    later = start + get_config().window - 5
    monkeypatch.setattr(time, "time", lambda: later)
    reader.cookies.pop(throttle.COOKIE_NAME)
    reader.post("/forum/bookmark/1/", **FETCH)

    assert counts_at(TOPIC_1, start + get_config().window + 30) == GUEST


def test_a_post_answered_by_a_redirect_does_not_move_rooms(backend):
    reader = client_of()
    reader.get("/forum/topic/1/", **PAGE_VIEW)
    reader.cookies.pop(throttle.COOKIE_NAME)

    response = reader.post("/forum/reply/1/", **PAGE_VIEW)  # a form, sent as a navigation

    assert response.status_code == 302
    assert counts(TOPIC_1) == GUEST


def test_a_404_creates_no_room(backend, r):
    reader = client_of()
    reader.get("/forum/topic/1/", **PAGE_VIEW)
    for pk in range(50, 60):
        reader.cookies.pop(throttle.COOKIE_NAME, None)
        assert reader.get(f"/forum/topic/{pk}/", **PAGE_VIEW).status_code == 404

    assert sorted(key.decode() for key in r.scan_iter(match="*room:*")) == [
        f"{{whos_online}}:room:{TOPIC_1}:guests"
    ]
    assert r.zcard("{whos_online}:rooms") == 1
    assert counts(TOPIC_1) == GUEST  # and the reader is still where they were


def test_a_page_without_a_room_takes_its_reader_out(backend):
    reader = client_of()
    reader.get("/forum/topic/1/", **PAGE_VIEW)
    reader.get("/forum/", **PAGE_VIEW)

    assert counts(TOPIC_1) == NOBODY
    assert counts() == GUEST


# ROOMS: rooms for views the site did not write


def test_rooms_gives_rooms_to_an_installed_app_s_views(backend, alice):
    configure_names = client_of(alice)
    configure_names.get("/forum/topic/1/", **PAGE_VIEW)
    client_of().get("/forum/topic/1/some-slug/", REMOTE_ADDR="192.0.2.8", **PAGE_VIEW)
    Client(REMOTE_ADDR="192.0.2.9").get("/forum/topic/2/", **PAGE_VIEW)

    assert counts(TOPIC_1) == OnlineCounts(users=1, guests=1, bots=0, total=2)
    assert [user.name for user in whos_online.online_users(room=TOPIC_1)] == ["alice"]
    assert counts(TOPIC_2) == GUEST


def test_a_room_the_view_sets_wins_over_rooms(backend):
    client_of().get("/forum/pinned/7/", **PAGE_VIEW)

    assert counts("pinned") == GUEST
    assert counts("pinned:7") == NOBODY


def test_here_shows_the_room_of_the_page_or_the_site(backend):
    Client(REMOTE_ADDR="192.0.2.9").get("/forum/topic/2/", **PAGE_VIEW)
    reader = client_of()
    reader.get("/forum/topic/1/", **PAGE_VIEW)

    assert shown(reader.get("/forum/topic/1/", **PAGE_VIEW)) == "topic 1 Here now: 1 guest count=1"
    assert shown(reader.get("/forum/", **PAGE_VIEW)) == "index Who's online: 2 guests count=2"


def test_here_and_site_show_the_room_and_the_site_from_one_tag(backend, alice):
    whos_online.record_user(alice)  # on the site, in no room
    client_of().get("/forum/topic/2/", REMOTE_ADDR="192.0.2.8", **PAGE_VIEW)

    # A newcomer's first page counts them in both lists.
    assert shown(client_of().get("/forum/both/2/", **PAGE_VIEW)) == (
        "both 2 Here now: 2 guests Who's online: alice and 2 guests"
    )
    # On a page in no room, the site's list once.
    assert shown(client_of().get("/forum/both/0/", **PAGE_VIEW)) == (
        "both 0 Who's online: alice and 2 guests"
    )


def test_room_and_here_together_are_refused(backend):
    with pytest.raises(TemplateSyntaxError, match="room= or here=True"):
        render('{% load whos_online %}{% whos_online room="a" here=True %}')


# The viewer on their own page


def test_a_newcomer_s_first_page_counts_them(backend):
    assert shown(client_of().get("/forum/", **PAGE_VIEW)) == "index Who's online: 1 guest count=1"
    room_page = client_of().get("/forum/topic/1/", REMOTE_ADDR="192.0.2.8", **PAGE_VIEW)
    assert shown(room_page) == "topic 1 Here now: 1 guest count=1"


def test_a_user_s_first_page_names_them(backend, alice, bob):
    whos_online.record_user(bob, room=TOPIC_1)

    assert shown(client_of(alice).get("/forum/topic/1/", **PAGE_VIEW)) == (
        "topic 1 Here now: alice and bob count=2"
    )


def test_a_hidden_user_is_counted_on_their_own_page_not_named(backend, settings, bob):
    configure(settings, HIDE_USER="tests.support.helpers.hide_bob")

    assert shown(client_of(bob).get("/forum/", **PAGE_VIEW)) == (
        "index Who's online: 1 person count=1"
    )


def test_the_viewer_is_counted_once_on_every_later_page(backend, monkeypatch):
    reader = client_of()
    start = time.time()
    reader.get("/forum/topic/1/", **PAGE_VIEW)
    assert shown(reader.get("/forum/topic/1/", **PAGE_VIEW)) == "topic 1 Here now: 1 guest count=1"
    # Past THROTTLE the cookie spares no write, but still says its browser is online.
    monkeypatch.setattr(time, "time", lambda: start + get_config().throttle + 5)
    assert shown(reader.get("/forum/topic/1/", **PAGE_VIEW)) == "topic 1 Here now: 1 guest count=1"
    assert shown(reader.get("/forum/topic/2/", **PAGE_VIEW)) == "topic 2 Here now: 1 guest count=1"
    assert shown(reader.get("/forum/", **PAGE_VIEW)) == "index Who's online: 1 guest count=1"


@pytest.mark.parametrize("same_process", [True, False], ids=["same-process", "another-process"])
def test_the_viewer_is_listed_on_their_own_page_right_after_a_move(
    backend, settings, monkeypatch, same_process
):
    """A reload of the room a reader just moved to: the process may keep a snapshot of that
    room read before the move was written (SNAPSHOT_MAX_AGE), which must not be shown."""
    configure(settings, ROOMS=ROOMS, SNAPSHOT_MAX_AGE=60)
    # Every request in one second. A cookie knows the second its visit was recorded in, taken as
    # the request starts; a render that crosses into the next second keeps a snapshot that looks
    # read after the visit although it was read before the visit was written, a limit of
    # snapshots.SnapshotCache.get that this test is not about.
    frozen = int(time.time()) + 0.5
    monkeypatch.setattr(time, "time", lambda: frozen)
    reader = client_of()
    reader.get("/forum/topic/1/", **PAGE_VIEW)
    other = Client(REMOTE_ADDR="192.0.2.77")
    assert shown(other.get("/forum/topic/2/", **PAGE_VIEW)) == "topic 2 Here now: 1 guest count=1"
    # The process now keeps topic 2's snapshot, read before the other guest's visit and the
    # reader's move were written: the move's page counts the reader in (the other guest shows
    # once the kept snapshot is SNAPSHOT_MAX_AGE old, or in a read that looks for the reader).
    assert shown(reader.get("/forum/topic/2/", **PAGE_VIEW)).endswith("count=1")  # the move

    with contextlib.ExitStack() as stack:
        if not same_process:
            stack.enter_context(process(monkeypatch, RecentVisitors()))
        assert shown(reader.get("/forum/topic/2/", **PAGE_VIEW)) == (
            "topic 2 Here now: 2 guests count=2"
        )


def test_a_page_s_own_fragment_does_not_count_its_viewer_in_a_room(backend):
    reader = client_of()
    reader.get("/forum/", **PAGE_VIEW)
    fragment = reader.get("/forum/topic/1/", **FETCH)  # an htmx swap of a topic's part, say

    assert shown(fragment) == "topic 1 Here now: nobody count=0"


def test_the_widget_s_refresh_does_not_count_its_viewer(backend):
    """Its answer may be shared by a cache: it shows what Redis holds."""
    markup = client_of().get("/forum/live/1/", REMOTE_ADDR="192.0.2.8", **PAGE_VIEW).content
    url = re.search(r'data-whos-online-live="([^"]+)"', markup.decode())
    assert url is not None
    refreshed = Client(REMOTE_ADDR="192.0.2.9").get(html.unescape(url.group(1)), **FETCH)

    assert widget_text(refreshed.content.decode()) == "Here now: 1 guest"


# Who may read a room


def test_a_room_is_read_only_with_the_token_of_a_page_that_showed_it(backend):
    client_of().get("/forum/topic/1/", **PAGE_VIEW)
    widget_url, _presence = widget_urls(
        client_of().get("/forum/live/1/", **PAGE_VIEW).content.decode()
    )
    stranger = Client()

    assert stranger.get(widget_url).status_code == 200
    assert stranger.get("/online/widget/", {"room": TOPIC_1}).status_code == 403
    assert stranger.get("/online/counts.json", {"room": TOPIC_1}).status_code == 403
    other_token = whos_online.room_token(TOPIC_2)
    for forged in (other_token, "x" * len(other_token), "é"):
        query = {"room": TOPIC_1, "token": forged}
        assert stranger.get("/online/counts.json", query).status_code == 403
    query = {"room": TOPIC_1, "token": whos_online.room_token(TOPIC_1)}
    assert stranger.get("/online/counts.json", query).json()["total"] == 1


def test_a_room_s_document_carries_none_of_the_site_s_figures(backend):
    client_of().get("/forum/topic/1/", **PAGE_VIEW)
    query = {"room": TOPIC_1, "token": whos_online.room_token(TOPIC_1)}

    document = Client().get("/online/counts.json", query).json()

    assert document == {
        "ok": True,
        "users": 0,
        "guests": 1,
        "bots": 0,
        "total": 1,
        "room": TOPIC_1,
        "names": [],
        "more": 0,
    }


def may_read_odd_topics(request: HttpRequest, room: str) -> bool:
    return room.startswith("topic:") and int(room.removeprefix("topic:")) % 2 == 1


def test_room_access_decides_instead_of_tokens(backend, settings):
    configure(settings, ROOM_ACCESS="tests.recording.test_real_site_rooms.may_read_odd_topics")
    query = {"room": TOPIC_2, "token": whos_online.room_token(TOPIC_2)}

    allowed = Client().get("/online/counts.json", {"room": TOPIC_1})
    assert allowed.status_code == 200
    assert "private" in allowed["Cache-Control"]  # decided per request: no shared cache
    assert Client().get("/online/counts.json", query).status_code == 403
    assert Client().get("/online/widget/", query).status_code == 403


# One truth across processes


@contextlib.contextmanager
def process(monkeypatch: pytest.MonkeyPatch, memory: RecentVisitors) -> Iterator[None]:
    """Serve the block as another process would: with its own memory of recent visitors and no
    kept snapshots of this one."""
    with monkeypatch.context() as patch:
        for module in (throttle, recording, visits, viewer):
            patch.setattr(module, "recent", lambda: memory)
        snapshots.invalidate()
        yield


@pytest.mark.parametrize("cookies", [True, False], ids=["with-cookies", "without-cookies"])
def test_the_latest_page_view_wins_whichever_process_served_it(backend, monkeypatch, cookies):
    first, second = RecentVisitors(), RecentVisitors()
    browser = client_of()
    for memory, pk in ((first, 1), (second, 2), (first, 1)):
        with process(monkeypatch, memory):
            if not cookies:
                browser.cookies.clear()
            browser.get(f"/forum/topic/{pk}/", **PAGE_VIEW)

    assert counts(TOPIC_1) == GUEST
    assert counts(TOPIC_2) == NOBODY


def test_staying_in_a_room_costs_nothing(
    backend, alice, redis_calls: RedisCalls, django_assert_num_queries
):
    reader = client_of(alice)
    reader.get("/forum/bookmark/1/", **FETCH)  # loads the scripts
    reader.get("/forum/topic/1/", **PAGE_VIEW)
    whos_online.online_counts(room=TOPIC_1)
    redis_calls.clear()

    with django_assert_num_queries(0):
        reader.get("/forum/bookmark/1/", **FETCH)
    assert redis_calls.trips == []


# Live presence


def stay(browser: Client, presence_url: str) -> int:
    return int(browser.post(presence_url, **SAME_SITE, **FETCH).status_code)


def leave(browser: Client, presence_url: str) -> Any:
    return browser.post(f"{presence_url}&leave=1", **SAME_SITE, **FETCH)


def test_a_reader_whose_page_stays_open_stays_in_the_room(backend, monkeypatch):
    window = get_config().window
    reader = client_of()
    start = time.time()
    _live, presence = widget_urls(reader.get("/forum/live/1/", **PAGE_VIEW).content.decode())
    for minutes in range(1, 16):  # a quarter of an hour without a click
        now = start + 60 * minutes
        monkeypatch.setattr(time, "time", lambda now=now: now)
        assert stay(reader, presence) == 204

    assert start + 15 * 60 > start + window
    assert counts_at(TOPIC_1, start + 15 * 60 + 1) == GUEST


def test_a_page_s_still_here_writes_once_per_throttle(
    backend, monkeypatch, redis_calls: RedisCalls
):
    reader = client_of()
    start = time.time()
    _live, presence = widget_urls(reader.get("/forum/live/1/", **PAGE_VIEW).content.decode())
    redis_calls.clear()
    assert stay(reader, presence) == 204  # at once: the cookie spares it
    for second in range(5):
        later = start + get_config().throttle + 1 + second
        monkeypatch.setattr(time, "time", lambda later=later: later)
        assert stay(reader, presence) == 204

    assert redis_calls.commands == ["EVALSHA"]


def test_a_page_s_still_here_does_not_undo_a_later_page(backend):
    reader = client_of()
    _live, presence = widget_urls(reader.get("/forum/live/1/", **PAGE_VIEW).content.decode())
    reader.get("/forum/topic/2/", **PAGE_VIEW)  # another tab, opened later
    reader.cookies.pop(throttle.COOKIE_NAME)

    assert stay(reader, presence) == 204

    assert counts(TOPIC_2) == GUEST
    assert counts(TOPIC_1) == NOBODY


def test_a_reader_who_leaves_is_gone_within_seconds(backend):
    reader = client_of()
    Client(REMOTE_ADDR="192.0.2.9").get("/forum/topic/1/", **PAGE_VIEW)
    _live, presence = widget_urls(reader.get("/forum/live/1/", **PAGE_VIEW).content.decode())
    now = time.time()

    response = leave(reader, presence)

    assert response.status_code == 204
    assert response.cookies[throttle.COOKIE_NAME]["max-age"] == 0  # spent
    assert counts_at(TOPIC_1, now + get_config().leave_grace + 1) == GUEST  # the other reader
    assert counts_at(TOPIC_1, now) == OnlineCounts(0, 2, 0, 2)  # not yet: a reload may follow
    assert counts() == OnlineCounts(0, 2, 0, 2)  # both still on the site


def test_a_reload_s_still_here_undoes_the_leaving_of_the_page_before(backend, redis_calls):
    reader = client_of()
    _live, presence = widget_urls(reader.get("/forum/live/1/", **PAGE_VIEW).content.decode())
    reader.get("/forum/live/1/", **PAGE_VIEW)  # the reload is requested first (throttled)
    now = time.time()
    assert leave(reader, presence).status_code == 204  # then the old page's word arrives
    assert stay(reader, presence) == 204  # and the new page speaks once it is shown

    assert counts_at(TOPIC_1, now + get_config().leave_grace + 1) == GUEST


def test_a_reader_written_by_the_page_s_own_request_after_a_reload_can_leave(backend):
    """A reload's leaving word spends the cookie; the new page's own script (a bookmark POST)
    may then be answered before its "still here", with a cookie that knows no room. Closing
    the tab still takes the reader out: Redis checks that the room is theirs."""
    reader = client_of()
    _live, presence = widget_urls(reader.get("/forum/live/1/", **PAGE_VIEW).content.decode())
    reader.get("/forum/live/1/", **PAGE_VIEW)  # the reload (throttled)
    assert leave(reader, presence).status_code == 204  # the old page's word: cookie spent
    reader.post("/forum/bookmark/1/", **FETCH)  # the new page's script, before its word
    assert throttle.cookie_room(reader.cookies[throttle.COOKIE_NAME].value) == throttle.UNKNOWN_ROOM
    assert stay(reader, presence) == 204  # throttled by the cookie the bookmark got
    now = time.time()

    assert leave(reader, presence).status_code == 204  # the tab is closed

    assert counts_at(TOPIC_1, now + get_config().leave_grace + 1) == NOBODY
    assert counts() == GUEST  # still on the site


def test_a_frame_of_the_site_s_own_pages_keeps_its_reader_in_the_room(backend):
    """An editor reading a topic opens a preview of another page, framed in the site's own
    admin: they stay in the topic's room."""
    reader = client_of()
    reader.get("/forum/topic/1/", **PAGE_VIEW)
    reader.cookies.pop(throttle.COOKIE_NAME)

    framed: dict[str, Any] = {"HTTP_SEC_FETCH_DEST": "iframe", "HTTP_SEC_FETCH_SITE": "same-origin"}
    reader.get("/forum/topic/2/", **framed)
    reader.get("/forum/", **framed)

    assert counts(TOPIC_1) == GUEST
    assert counts(TOPIC_2) == NOBODY


def test_a_reader_who_left_is_not_put_back_by_a_request_that_is_no_page_view(backend):
    """The leave is final: the reader's next background request (another tab's fetch, a 404, a
    script's POST) keeps them online, and out of the room."""
    reader = client_of()
    _live, presence = widget_urls(reader.get("/forum/live/1/", **PAGE_VIEW).content.decode())
    now = time.time()
    assert leave(reader, presence).status_code == 204

    reader.post("/forum/bookmark/1/", **FETCH)  # recorded: the leave spent the cookie
    reader.get("/forum/topic/99/", **PAGE_VIEW)  # a 404
    reader.cookies.pop(throttle.COOKIE_NAME)
    reader.post("/forum/bookmark/1/", **FETCH)  # recorded again

    assert counts_at(TOPIC_1, now + get_config().leave_grace + 1) == NOBODY
    assert counts() == GUEST  # still on the site


def test_a_still_here_after_the_grace_does_not_put_the_reader_back(backend, monkeypatch):
    reader = client_of()
    _live, presence = widget_urls(reader.get("/forum/live/1/", **PAGE_VIEW).content.decode())
    now = time.time()
    assert leave(reader, presence).status_code == 204
    later = now + get_config().leave_grace + 1
    monkeypatch.setattr(time, "time", lambda: later)

    assert stay(reader, presence) == 204  # a page of the room left open in another tab

    assert counts_at(TOPIC_1, later + 1) == NOBODY
    reader.get("/forum/live/1/", **PAGE_VIEW)  # only a page view of the room brings them back
    assert counts_at(TOPIC_1, later + 1) == GUEST


def test_a_reader_who_moved_out_is_not_put_back_by_an_old_tab(backend, monkeypatch):
    reader = client_of()
    _live, presence = widget_urls(reader.get("/forum/live/1/", **PAGE_VIEW).content.decode())
    reader.get("/forum/", **PAGE_VIEW)  # a page in no room, in another tab
    reader.cookies.pop(throttle.COOKIE_NAME)

    with process(monkeypatch, RecentVisitors()):  # served where nothing spares its write
        assert stay(reader, presence) == 204  # the first tab, still open and shown

    assert counts(TOPIC_1) == NOBODY
    assert counts() == GUEST


def test_leaving_twice_or_leaving_another_room_does_nothing(backend, redis_calls: RedisCalls):
    reader = client_of()
    _live, presence = widget_urls(reader.get("/forum/live/1/", **PAGE_VIEW).content.decode())
    reader.get("/forum/topic/2/", **PAGE_VIEW)
    redis_calls.clear()

    leaving = leave(reader, presence)  # its cookie says topic 2

    assert throttle.COOKIE_NAME not in leaving.cookies
    assert redis_calls.trips == []
    assert counts_at(TOPIC_2, time.time() + get_config().leave_grace + 1) == GUEST


@pytest.mark.parametrize(
    ("headers", "status"),
    [
        ({"HTTP_SEC_FETCH_SITE": "cross-site"}, 403),
        ({"HTTP_SEC_FETCH_SITE": "same-site"}, 403),
        ({"HTTP_ORIGIN": "https://elsewhere.example"}, 403),
        ({"HTTP_ORIGIN": "http://testserver"}, 204),
        ({}, 204),  # no browser's request: nobody's page can have sent it for them
    ],
    ids=["cross-site", "same-site", "other-origin", "same-origin", "not-a-browser"],
)
def test_only_the_site_s_own_pages_speak_for_their_reader(backend, headers, status):
    reader = client_of()
    _live, presence = widget_urls(reader.get("/forum/live/1/", **PAGE_VIEW).content.decode())

    assert reader.post(f"{presence}&leave=1", **headers).status_code == status


def test_presence_needs_the_room_s_token_and_a_post(backend):
    reader = client_of()
    reader.get("/forum/live/1/", **PAGE_VIEW)

    assert reader.post(f"/online/presence/?room={TOPIC_1}", **SAME_SITE).status_code == 403
    token = whos_online.room_token(TOPIC_1)
    assert reader.get(f"/online/presence/?room={TOPIC_1}&token={token}").status_code == 405
    assert reader.post("/online/presence/?room=", **SAME_SITE).status_code == 400


# Checks of ROOMS


def ids(messages: list[Any]) -> list[str]:
    return [message.id for message in messages]


@pytest.mark.parametrize(
    "value",
    [
        ["forum:topic"],
        {"forum:topic": 1},
        {"forum:topic": "topic:{-1}"},
        {"": "x"},
        {"a": "{"},
        {"a": {"room": "x", "call": "tests.urls.page"}},
        {"a": {"title": "x"}},
        {"a": {"room": "x", "colour": "red"}},
        {"a": {"call": "tests.recording.test_real_site_rooms.nothing_here"}},
        {"a": {"call": "tests.recording.test_real_site_rooms.TOPIC_1"}},
        {"a": {"call": "tests.urls.page", "title": "x"}},
    ],
    ids=[
        "list",
        "not-text",
        "odd-field",
        "empty-name",
        "broken-format",
        "room-and-call",
        "neither",
        "unknown-key",
        "not-importable",
        "not-callable",
        "title-with-call",
    ],
)
def test_a_malformed_rooms_is_an_error(settings, value):
    settings.WHOS_ONLINE = {"ROOMS": value}
    assert ids(check_settings()) == ["whos_online.E029"]
    assert check_room_urls() == []  # said once


def test_rooms_must_name_urls_the_site_has(settings):
    settings.WHOS_ONLINE = {"ROOMS": {"forum:topics": "t:{pk}", "topic": "t:{pk}"}}
    messages = check_room_urls()
    assert ids(messages) == ["whos_online.E031", "whos_online.E031"]
    assert "'forum:topics'" in messages[0].msg


def test_a_room_pattern_may_only_use_what_every_url_of_its_name_captures(settings):
    settings.WHOS_ONLINE = {"ROOMS": {"forum:topic": "topic:{pk}:{slug}", "forum:live": "{pk}"}}
    messages = check_room_urls()
    assert ids(messages) == ["whos_online.E032"]
    assert "slug" in messages[0].msg


def test_a_positional_capture_is_for_urls_that_capture_no_keyword(settings):
    settings.WHOS_ONLINE = {"ROOMS": {"forum:topic": "topic:{0}"}}
    messages = check_room_urls()
    assert ids(messages) == ["whos_online.E032"]
    assert "'0'" not in messages[0].msg
    assert "not capture 0" in messages[0].msg


def test_room_access_must_be_a_callable(settings):
    settings.WHOS_ONLINE = {"ROOM_ACCESS": "tests.recording.test_real_site_rooms.nothing_here"}
    assert ids(check_settings()) == ["whos_online.E030"]


def test_the_site_s_rooms_pass_the_checks():
    assert check_settings() == []
    assert check_room_urls() == []


def test_a_page_listing_other_rooms_does_not_count_its_viewer_in_them(backend):
    assert client_of().get("/forum/overview/", **PAGE_VIEW).content == b"0/1"
