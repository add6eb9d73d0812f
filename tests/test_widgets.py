"""The widgets view: every live widget of a page refreshed in one request, each answered as the
widget view would answer it alone (names rule, room tokens, fail-open), with one read of Redis
for all of them and caching that is as strict as the strictest answer."""

from __future__ import annotations

import html
import json
import re
import time
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import pytest
from django.contrib.auth import get_user_model
from django.http import HttpRequest, HttpResponse
from django.template import engines
from django.test import Client
from django.urls import include, path, reverse

import whos_online
from tests.support.helpers import client_of, configure, widget_text
from whos_online.flushing import batches
from whos_online.live.widget import MAX_WIDGETS
from whos_online.reading.viewer import room_token
from whos_online.recording.throttle import COOKIE_NAME

if TYPE_CHECKING:
    from tests.support.helpers import RedisCalls

pytestmark = pytest.mark.urls(__name__)

#: A topic page with three live widgets: its room's, the site's, and both in one.
TOPIC = engines["django"].from_string(
    "{% load whos_online %}<main>topic {{ pk }}</main>"
    "{% whos_online live=True here=True %}"
    "{% whos_online live=True visitors=True refresh=10 %}"
    "{% whos_online live=True here=True site=True %}"
)


def topic(request: HttpRequest, pk: int) -> HttpResponse:
    whos_online.set_room(request, f"topic:{pk}")
    return HttpResponse(TOPIC.render({"pk": pk}, request))


urlpatterns = [
    path("topics/<int:pk>/", topic),
    path("online/", include("whos_online.urls")),
]

URL = "/online/widgets/"
PAGE_VIEW: dict[str, Any] = {"HTTP_SEC_FETCH_DEST": "document", "HTTP_SEC_FETCH_MODE": "navigate"}


def widget_urls(markup: str) -> list[str]:
    """The widget view's URL of each widget of a page, in the page's order."""
    return [html.unescape(url) for url in re.findall(r'data-whos-online-live="([^"]+)"', markup)]


def query_of(url: str) -> str:
    return url.partition("?")[2]


def together(urls: list[str]) -> str:
    """The URL live.js asks for the widgets of ``urls`` at once."""
    return f"{URL}?{urlencode([('widget', query_of(url)) for url in urls])}"


def answers(response: Any) -> list[dict[str, Any]]:
    assert response.status_code == 200
    assert response["Content-Type"] == "application/json"
    found: list[dict[str, Any]] = json.loads(response.content)["widgets"]
    return found


def without_renewal(markup: str) -> str:
    return re.sub(r' data-whos-online-renew="\d+"', "", markup)


def open_topic(browser: Client, pk: int = 1) -> list[str]:
    return widget_urls(browser.get(f"/topics/{pk}/", **PAGE_VIEW).content.decode())


@pytest.fixture
def online(backend, alice, bob) -> None:
    """alice reads topic 1, bob another page, two guests are about (one of them in topic 1)."""
    now = time.time()
    whos_online.record_user(bob, now=now - 3)
    whos_online.record_guest("198.51.100.1", now=now - 2)
    whos_online.record_guest("198.51.100.2", room="topic:1", now=now - 1)
    whos_online.record_user(alice, room="topic:1", now=now)


def test_the_url_is_named():
    assert reverse("whos_online:widgets") == URL


def test_each_widget_is_answered_as_the_widget_view_answers_it(online, staff):
    reader = client_of(staff)
    urls = open_topic(reader)
    assert len(urls) == 3

    found = answers(reader.get(together(urls)))

    assert [answer["status"] for answer in found] == [200, 200, 200]
    assert all(answer["ok"] for answer in found)
    # (But for the seconds to the token's renewal, which a second's tick between them changes.)
    assert [without_renewal(answer["html"]) for answer in found] == [
        without_renewal(reader.get(url).content.decode()) for url in urls
    ]
    assert [widget_text(answer["html"]) for answer in found] == [
        "Here now: sam, alice and 1 guest",
        "Who's online: sam, alice, bob and 2 guests 5 unique visitors today",
        "Here now: sam, alice and 1 guest Who's online: sam, alice, bob and 2 guests",
    ]


def test_the_page_s_widgets_are_one_round_trip_and_record_nobody(
    settings, online, redis_calls: RedisCalls
):
    configure(settings, COUNT_HITS=True)
    reader = client_of()
    urls = open_topic(reader)
    guests_before = whos_online.online_counts().guests
    redis_calls.clear()

    response = reader.get(together(urls))

    assert redis_calls.trips == [["EVALSHA", "EVALSHA"]]  # the room and the site, once each
    assert whos_online.online_counts().guests == guests_before
    assert batches.buffer().total() == 0
    assert COOKIE_NAME not in response.cookies


@pytest.mark.parametrize(
    ("show_names_to", "viewer", "named"),
    [("staff", None, False), ("staff", "sam", True), ("authenticated", "alice", True)],
)
@pytest.mark.usefixtures("online", "staff")
def test_names_only_for_those_allowed(settings, show_names_to, viewer, named):
    configure(settings, SHOW_NAMES_TO=show_names_to)
    reader = client_of(get_user_model().objects.get(username=viewer) if viewer else None)

    found = answers(reader.get(together(open_topic(reader))))

    for answer in found:
        assert ("alice" in answer["html"]) is named
        assert (" user" in widget_text(answer["html"])) is not named  # "1 user", "2 users"


def test_a_refused_token_is_answered_for_its_widget_alone(online):
    reader = client_of()
    room, site, both = open_topic(reader)
    stale = room_token("topic:1", now=time.time() - 3601)
    expired = re.sub(r"token=[^&]+", f"token={stale}", room)

    response = reader.get(together([expired, site, both, f"{URL}?peak=2"]))

    found = answers(response)
    assert [answer["status"] for answer in found] == [403, 200, 200, 400]
    assert found[0] == {"status": 403}
    assert found[3] == {"status": 400, "error": "peak must be 0 or 1."}
    assert widget_text(found[1]["html"]).startswith("Who's online: 2 users and 3 guests")
    # A verdict of the moment, which no cache keeps.
    assert "no-store" in response["Cache-Control"]


def test_each_widget_keeps_its_own_token_s_issue_time(online):
    """A page's widgets may hold tokens of different ages (one was renewed): each refresh hands
    every widget back tokens of its own issue time, as a refresh of its own would."""
    older = room_token("topic:1", now=time.time() - 600)
    newer = room_token("topic:2", now=time.time() - 60)
    queries = [
        urlencode({"room": "topic:1", "token": older}),
        urlencode({"room": "topic:2", "token": newer, "site": 1}),
    ]

    found = answers(Client().get(URL, {"widget": queries}))

    assert f"token={older}" in found[0]["html"]
    assert f"token={newer}" in found[1]["html"]
    assert "site=1" in found[1]["html"]


@pytest.mark.parametrize(
    ("viewer", "widgets", "cache_control"),
    [
        ("guest", "site", "public, max-age=7"),
        ("guest", "all", "public, max-age=7"),  # a guest's tokens are every guest's
        ("member", "site", "public, max-age=7"),  # a member who may not see names
        ("member", "all", "private, max-age=7"),  # a token of the member's session
        ("staff", "site", "private, max-age=7"),  # names only some may see
    ],
)
def test_cached_as_strictly_as_the_strictest_answer(
    settings, online, alice, staff, *, viewer, widgets, cache_control
):
    configure(settings, JSON_MAX_AGE=7)
    reader = {"guest": client_of(), "member": client_of(alice), "staff": client_of(staff)}[viewer]
    urls = open_topic(reader)

    response = reader.get(together(urls if widgets == "all" else urls[1:2]))

    assert response["Cache-Control"] == cache_control


def may_read_everything(request: HttpRequest, room: str) -> bool:
    return True


def test_rooms_read_by_room_access_are_private(settings, online):
    configure(settings, JSON_MAX_AGE=7, ROOM_ACCESS="tests.test_widgets.may_read_everything")

    found = Client().get(URL, {"widget": ["room=topic%3A1", ""]})

    assert [answer["status"] for answer in answers(found)] == [200, 200]
    assert found["Cache-Control"] == "private, max-age=7"


def test_each_widget_in_the_language_of_its_page(backend, settings):
    settings.LANGUAGES = [("en", "English"), ("de", "German")]

    found = answers(Client().get(URL, {"widget": ["lang=de", "lang=en"]}))

    assert "lang=de" in found[0]["html"]
    assert "lang=en" in found[1]["html"]


def test_the_html_in_the_document_is_inert(backend, settings, db):
    configure(settings, SHOW_NAMES_TO="everyone")
    whos_online.record_user(get_user_model().objects.create_user("<b>&</b>"))

    response = Client().get(URL, {"widget": [""]})

    assert b"<" not in response.content
    assert b"&" not in response.content.replace(b"\\u0026", b"")
    assert "&lt;b&gt;&amp;&lt;/b&gt;" in answers(response)[0]["html"]


def test_says_which_widgets_could_not_be_read(redis_down):
    found = answers(Client().get(URL, {"widget": ["", "visitors=1"]}))

    assert [answer["ok"] for answer in found] == [False, False]
    assert widget_text(found[0]["html"]).startswith("Who's online: nobody")


@pytest.mark.parametrize("count", [0, MAX_WIDGETS + 1])
def test_too_few_or_too_many_widgets_are_a_bad_request(backend, count):
    response = Client().get(URL, {"widget": [""] * count})

    assert response.status_code == 400
    assert response["Content-Type"] == "text/plain; charset=utf-8"


@pytest.mark.parametrize("method", ["post", "put", "delete"])
def test_only_get_and_head(backend, method):
    assert getattr(Client(), method)(f"{URL}?widget=").status_code == 405
    assert Client().head(f"{URL}?widget=").status_code == 200
