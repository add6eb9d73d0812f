"""Room tokens: one room only, one viewer only, for a while only; and every view that takes one."""

from __future__ import annotations

import asyncio
import re
import time
from datetime import timedelta
from importlib import import_module
from typing import Any
from urllib.parse import urlencode

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings as django_settings
from django.http import HttpRequest, HttpResponse
from django.template import engines
from django.test import Client, RequestFactory
from django.urls import include, path
from django.utils import timezone
from hypothesis import given
from hypothesis import strategies as st

import whos_online
from tests.support.asgi_stream import Stream
from tests.support.helpers import configure, widget_urls
from whos_online.config.settings import get_config
from whos_online.live import subscription
from whos_online.reading import viewer
from whos_online.reading.viewer import check_token, room_token
from whos_online.recording import guests
from whos_online.recording.state import state_of

pytestmark = pytest.mark.urls(__name__)

BOARD = engines["django"].from_string(
    "{% load whos_online %}<main>{{ slug }}</main>{% whos_online live=True here=True %}"
)


def board(request: HttpRequest, slug: str) -> HttpResponse:
    """A board page, as the base template of a forum renders it (its 404 page would too)."""
    return HttpResponse(BOARD.render({"slug": slug}, request))


urlpatterns = [
    path("board/<str:slug>/", board, name="board"),
    path("online/", include("whos_online.urls")),
]

SAME_SITE: dict[str, Any] = {"HTTP_SEC_FETCH_SITE": "same-origin"}
PAGE_VIEW: dict[str, Any] = {"HTTP_SEC_FETCH_DEST": "document", "HTTP_SEC_FETCH_MODE": "navigate"}
MAX_AGE = 3600
NOW = 1_800_000_000.0


def request_with_session(key: str = "") -> HttpRequest:
    request = RequestFactory().get("/")
    if key:
        request.COOKIES["sessionid"] = key
    return request


def token_in(url: str) -> str:
    found = re.search(r"token=([^&]+)", url)
    assert found is not None
    return found.group(1)


# One room only


def test_a_room_s_token_verifies_for_that_room():
    viewer = request_with_session()
    token = room_token("board:secret", viewer, now=NOW)
    assert check_token("board:secret", token, viewer, MAX_AGE, now=NOW)


@pytest.mark.parametrize(
    ("shown", "asked", "forge"),
    [
        ("board:secret:zz", "board:secret", lambda token: f"zz:{token}"),
        ("board:secret:zz", "board:secret", lambda token: f"zz.{token}"),
        ("board:secret:zz", "board:secret", lambda token: token),
        ("board:secret", "board:secret:zz", lambda token: token),
        ("a", "b", lambda token: token),
        ('["a", "', 'a"', lambda token: token),
    ],
    ids=["colon-prefix", "dot-prefix", "as-is", "longer", "other", "json-quotes"],
)
def test_no_token_of_one_room_verifies_for_another(shown, asked, forge):
    viewer = request_with_session()
    genuine = room_token(shown, viewer, now=NOW)
    assert not check_token(asked, forge(genuine), viewer, MAX_AGE, now=NOW)


@given(st.text(min_size=1, max_size=30), st.text(min_size=1, max_size=30))
def test_whatever_the_names_no_token_serves_two_rooms(first, second):
    if first == second:
        return
    viewer = request_with_session()
    assert not check_token(second, room_token(first, viewer, now=NOW), viewer, MAX_AGE, now=NOW)


@pytest.mark.parametrize(
    "token",
    ["", ".", "abc", "zz.", ".zz", "-1.abc", "é.abc", "x" * 4000, "1.2.3"],
    ids=["empty", "dot", "no-dot", "no-mac", "no-time", "negative", "not-ascii", "huge", "dots"],
)
def test_a_malformed_token_is_refused_quietly(token):
    assert not check_token("board:secret", token, request_with_session(), MAX_AGE, now=NOW)


def respell(token: str, how: str) -> str:
    """``token`` written another way that ``int(..., 36)`` or a lenient decoder would read
    as the same."""
    stamp, _dot, mac = token.partition(".")
    stamps = {
        "plus": f"+{stamp}",
        "space": f" {stamp}",
        "tab": f"\t{stamp}",
        "trailing-space": f"{stamp} ",
        "underscore": f"{stamp[:2]}_{stamp[2:]}",
        "leading-zero": f"0{stamp}",
        "upper-case": stamp.upper(),
    }
    if how in stamps:
        return f"{stamps[how]}.{mac}"
    macs = {
        "padded-mac": f"{mac}==",
        "standard-alphabet-mac": mac.replace("-", "+").replace("_", "/"),
        "upper-case-mac": mac.upper(),
        "mac-and-more": f"{mac}.",
    }
    return f"{stamp}.{macs[how]}"


@pytest.mark.parametrize(
    "how",
    [
        "plus",
        "space",
        "tab",
        "trailing-space",
        "underscore",
        "leading-zero",
        "upper-case",
        "padded-mac",
        "standard-alphabet-mac",
        "upper-case-mac",
        "mac-and-more",
    ],
)
def test_a_token_is_accepted_only_as_it_was_issued(how):
    viewer = request_with_session()
    # A room whose MAC has a "-" or "_", which base64's other alphabet spells "+" or "/".
    room = next(
        room
        for room in (f"board:{number}" for number in range(100))
        if {"-", "_"} & set(room_token(room, viewer, now=NOW).partition(".")[2])
    )
    genuine = room_token(room, viewer, now=NOW)
    assert check_token(room, genuine, viewer, MAX_AGE, now=NOW)

    spelt = respell(genuine, how)

    assert spelt != genuine
    assert not check_token(room, spelt, viewer, MAX_AGE, now=NOW)


# One viewer only


def test_a_token_is_bound_to_the_session_it_was_issued_to():
    token = room_token("topic:1", request_with_session("session-of-ann-0001"), now=NOW)

    same = request_with_session("session-of-ann-0001")
    assert check_token("topic:1", token, same, MAX_AGE, now=NOW)
    assert not check_token(
        "topic:1", token, request_with_session("session-of-ben-0002"), MAX_AGE, now=NOW
    )
    assert not check_token("topic:1", token, request_with_session(), MAX_AGE, now=NOW)


def test_clients_without_a_session_share_their_tokens():
    token = room_token("topic:1", request_with_session(), now=NOW)
    assert check_token("topic:1", token, request_with_session(), MAX_AGE, now=NOW)
    assert room_token("topic:1", now=NOW) == token  # no request: no session


# For a while only


def test_a_token_runs_out():
    viewer = request_with_session()
    token = room_token("topic:1", viewer, now=NOW)

    assert check_token("topic:1", token, viewer, MAX_AGE, now=NOW + MAX_AGE)
    assert not check_token("topic:1", token, viewer, MAX_AGE, now=NOW + MAX_AGE + 1)
    assert not check_token("topic:1", token, viewer, MAX_AGE, now=NOW - 120)  # from the future


def test_a_genuine_token_s_issue_time_is_kept_for_the_tokens_of_the_answer():
    viewer = request_with_session()
    token = room_token("topic:1", viewer, now=NOW)
    assert check_token("topic:1", token, viewer, MAX_AGE, now=NOW + 600)
    assert state_of(viewer).token_issued == int(NOW)

    assert room_token("topic:1", viewer, now=NOW + 600) == token  # no younger token


def test_tokens_of_a_rotated_secret_verify_while_it_is_a_fallback(settings):
    viewer = request_with_session()
    token = room_token("topic:1", viewer, now=NOW)

    settings.SECRET_KEY = "a-new-secret-key-for-the-rotation-test-0123456789"
    assert not check_token("topic:1", token, viewer, MAX_AGE, now=NOW)
    settings.SECRET_KEY_FALLBACKS = ["whos-online-tests"]
    assert check_token("topic:1", token, viewer, MAX_AGE, now=NOW)


# Every view that takes a token, against the forgery of a room whose name has a colon


@pytest.fixture
def boards(backend, settings):
    configure(settings, ROOMS={"board": "board:{slug}"}, SHOW_NAMES_TO="authenticated")


def test_a_token_of_a_longer_room_opens_no_view_of_the_shorter_one(boards, alice, bob):
    """The attack of the hardening pass: a member opens /board/secret:zz/, whose page carries a
    token of room "board:secret:zz", and tries it on the private board "board:secret"."""
    reader = Client()
    reader.force_login(bob)
    reader.get("/board/secret/", **PAGE_VIEW)  # bob reads the private board
    member = Client()
    member.force_login(alice)
    live, presence = widget_urls(member.get("/board/secret:zz/", **PAGE_VIEW).content.decode())
    genuine = token_in(live)
    assert member.get(live).status_code == 200

    for forged in (f"zz:{genuine}", f"zz.{genuine}", genuine, token_in(presence)):
        query = {"room": "board:secret", "token": forged}
        assert member.get("/online/counts.json", query).status_code == 403
        assert member.get("/online/widget/", query).status_code == 403
        assert member.post(f"/online/presence/?room=board:secret&token={forged}").status_code == 403
    assert [user.pk for user in whos_online.online_users(room="board:secret")] == [bob.pk]


def test_a_token_opens_the_views_for_its_viewer_only(boards, alice, bob):
    member = Client()
    member.force_login(alice)
    live, presence = widget_urls(member.get("/board/lounge/", **PAGE_VIEW).content.decode())
    other = Client()
    other.force_login(bob)

    assert member.get(live).status_code == 200
    assert member.get(live.replace("/online/widget/", "/online/counts.json")).status_code == 200
    assert member.post(presence, **SAME_SITE).status_code == 204
    assert other.get(live).status_code == 403
    assert other.post(presence, **SAME_SITE).status_code == 403
    assert Client().get(live).status_code == 403


def test_a_member_who_logs_out_loses_the_token(boards, alice):
    member = Client()
    member.force_login(alice)
    live, _presence = widget_urls(member.get("/board/lounge/", **PAGE_VIEW).content.decode())
    member.logout()
    member.force_login(alice)  # the same user, in a new session

    assert member.get(live).status_code == 403


# A session that ended takes its tokens with it, whichever store keeps it


@pytest.fixture
def live_boards(boards, settings, monkeypatch):
    configure(settings, ROOMS={"board": "board:{slug}"}, LIVE_UPDATES=True)
    # Each stream runs on an event loop of its own, whose subscription then ends with it.
    monkeypatch.setattr(subscription, "LINGER", 0.0)


SESSION_ENGINES = ["db", "cache", "cached_db", "file"]


@pytest.fixture(params=SESSION_ENGINES)
def session_engine(request, settings, tmp_path) -> Any:
    """Django's session store of that name (the cache ones in a cache of their own), as
    ``SESSION_ENGINE``; returns its module."""
    settings.SESSION_ENGINE = f"django.contrib.sessions.backends.{request.param}"
    settings.CACHES = {
        **settings.CACHES,
        "sessions": {
            "BACKEND": "django.core.cache.backends.locmem.LocMemCache",
            "LOCATION": "whos-online-test-sessions",
        },
    }
    settings.SESSION_CACHE_ALIAS = "sessions"
    settings.SESSION_FILE_PATH = str(tmp_path)
    return import_module(settings.SESSION_ENGINE)


def log_out(member: Client, engine: Any, key: str) -> None:
    member.logout()


def flush(member: Client, engine: Any, key: str) -> None:
    """What ``request.session.flush()`` does, from any process: the store forgets the key."""
    engine.SessionStore(key).flush()


def expire(member: Client, engine: Any, key: str) -> None:
    """The session's expiry passes (each store keeps it its own way)."""
    session = engine.SessionStore(key)
    session.set_expiry(timezone.now() - timedelta(minutes=1))
    session.save()


def answers_to(key: str, live: str, presence: str) -> dict[str, int]:
    """What a client that sends only the session cookie ``key`` gets from every view that
    takes the room token of ``live`` (the widget's URL) and ``presence``: each asked by a
    client of its own, since an answer may tell the client to drop the cookie."""
    query = live.partition("?")[2]
    [widget] = holder(key).get("/online/widgets/", {"widget": query}).json()["widgets"]
    return {
        "widget": holder(key).get(live).status_code,
        "counts": holder(key).get(f"/online/counts.json?{query}").status_code,
        "widgets": widget["status"],
        "presence": holder(key).post(presence, **SAME_SITE).status_code,
        "stream": stream_status(key, query),
    }


def holder(key: str) -> Client:
    """A new client with nothing but the session cookie ``key``."""
    made = Client()
    made.cookies[django_settings.SESSION_COOKIE_NAME] = key
    return made


def stream_status(key: str, query: str) -> int:
    """The status the live stream's first state gives the widget of ``query``."""

    async def scenario() -> int:
        stream = Stream(
            f"/online/stream/?{urlencode({'widget': query})}",
            cookies={django_settings.SESSION_COOKIE_NAME: key},
        )
        await stream.open()
        [answer] = await stream.state()
        await stream.close()
        return int(answer["status"])

    return int(async_to_sync(scenario)())


ACCEPTED = {"widget": 200, "counts": 200, "widgets": 200, "presence": 204, "stream": 200}
REFUSED = {"widget": 403, "counts": 403, "widgets": 403, "presence": 403, "stream": 403}


@pytest.mark.parametrize("end", [log_out, flush, expire], ids=["logout", "flush", "expiry"])
def test_a_token_is_worth_nothing_once_its_session_ended(live_boards, session_engine, alice, end):
    """Logging out is how a site revokes a session cookie that leaked: the cookie, and the
    tokens bound to it, must open nothing once the store has let the session go."""
    member = Client()
    member.force_login(alice)
    key = member.cookies[django_settings.SESSION_COOKIE_NAME].value
    live, presence = widget_urls(member.get("/board/secret/", **PAGE_VIEW).content.decode())
    assert answers_to(key, live, presence) == ACCEPTED  # a copy of the cookie, while it lives

    end(member, session_engine, key)

    assert answers_to(key, live, presence) == REFUSED


def test_a_tag_rendered_in_an_event_loop_binds_the_key_unchecked(alice):
    """An async view may not query the database: the tag's token then binds the session's key
    as the cookie gives it, rather than break the page; the views that check it run in a
    thread, and refuse it since the session is dead."""
    member = Client()
    member.force_login(alice)
    key = member.cookies[django_settings.SESSION_COOKIE_NAME].value
    member.logout()
    request = RequestFactory().get("/")
    request.session = import_module(django_settings.SESSION_ENGINE).SessionStore(key)

    async def in_a_view() -> str:
        return guests.session_key(request, live=True)

    assert asyncio.run(in_a_view()) == key
    assert guests.session_key(request, live=True) == ""  # checked, out of the loop: it is dead


def test_checking_a_token_costs_no_query_where_the_user_is_read_anyway(
    boards, alice, django_assert_num_queries
):
    """With SHOW_NAMES_TO "authenticated" the views read the user, and so the session: the
    check that the session lives reads it first, and nothing more."""
    member = Client()
    member.force_login(alice)
    live, _presence = widget_urls(member.get("/board/lounge/", **PAGE_VIEW).content.decode())
    query = live.partition("?")[2]

    with django_assert_num_queries(2):  # the session, the user
        assert member.get("/online/counts.json").status_code == 200
    with django_assert_num_queries(2):
        assert member.get(f"/online/counts.json?{query}").status_code == 200
    with django_assert_num_queries(2):
        assert member.get(live).status_code == 200


def test_where_nothing_reads_the_session_the_check_reads_it_once(
    backend, settings, alice, django_assert_num_queries, monkeypatch
):
    """With names shown to everyone the views read no user: a room's token costs one read of
    the session (one query of the database store), however many widgets it opens. (Moments
    after the member arrived, a refresh looks for them in Redis, which loads their user:
    ``reading.viewer``; these refreshes come later.)"""
    configure(settings, ROOMS={"board": "board:{slug}"}, SHOW_NAMES_TO="everyone")
    member = Client()
    member.force_login(alice)
    start = time.time()
    live, _presence = widget_urls(member.get("/board/lounge/", **PAGE_VIEW).content.decode())
    query = live.partition("?")[2]
    later = start + viewer.doubt(get_config()) + 1
    monkeypatch.setattr(time, "time", lambda: later)

    with django_assert_num_queries(0):
        assert member.get("/online/counts.json").status_code == 200
    with django_assert_num_queries(1):
        assert member.get(f"/online/counts.json?{query}").status_code == 200
    with django_assert_num_queries(1):
        widgets = member.get("/online/widgets/", {"widget": [query] * 5}).json()["widgets"]
    assert [widget["status"] for widget in widgets] == [200] * 5


def test_an_expired_token_is_refused_by_every_view(boards, settings):
    configure(settings, ROOMS={"board": "board:{slug}"}, ROOM_TOKEN_MAX_AGE=60)
    stale = room_token("board:lounge", now=time.time() - 61)
    query = {"room": "board:lounge", "token": stale}

    assert Client().get("/online/counts.json", query).status_code == 403
    assert Client().get("/online/widget/", query).status_code == 403
    assert Client().post(f"/online/presence/?room=board:lounge&token={stale}").status_code == 403


def test_the_widget_s_refresh_hands_back_a_token_no_younger(boards):
    issued = room_token("board:lounge", now=time.time() - 600)
    refreshed = Client().get("/online/widget/", {"room": "board:lounge", "token": issued})

    live, presence = widget_urls(refreshed.content.decode())
    assert token_in(live) == issued
    assert token_in(presence) == issued


def test_a_room_opened_by_a_session_s_token_is_not_shared_by_caches(boards, alice):
    member = Client()
    member.force_login(alice)
    live, _presence = widget_urls(member.get("/board/lounge/", **PAGE_VIEW).content.decode())

    assert "private" in member.get(live)["Cache-Control"]
    guest_live, _ = widget_urls(Client().get("/board/lounge/", **PAGE_VIEW).content.decode())
    assert "public" in Client().get(guest_live)["Cache-Control"]


def test_a_viewer_logged_in_by_the_page_gets_a_token_of_the_new_session(boards, alice):
    """A view that logs its visitor in gives the session a new key, which the browser sends
    from the next request on: the page's tokens are bound to that one."""
    member = Client()
    member.force_login(alice)
    session_key = member.session.session_key
    assert session_key is not None
    request = RequestFactory().get("/")
    request.COOKIES["sessionid"] = "the-key-before-the-login-000"
    request.session = member.session
    assert check_token(
        "board:lounge",
        room_token("board:lounge", request),
        request_with_session(session_key),
        MAX_AGE,
    )


def test_a_page_is_told_to_renew_its_tokens_well_before_they_run_out():
    assert viewer.renew_in(None, 3600, now=NOW) == 3540  # a minute before
    assert viewer.renew_in(None, 60, now=NOW) == 45  # a quarter before
    request = request_with_session()
    assert check_token("t", room_token("t", request, now=NOW), request, 60, now=NOW + 30)
    assert viewer.renew_in(request, 60, now=NOW + 30) == 15  # the refresh of an older page
    assert viewer.renew_in(request, 60, now=NOW + 59) == 1
