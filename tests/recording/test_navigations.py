"""Navigations that do not reload the page: htmx's boosted requests and history restores, Turbo
Drive's visits, and the page views a page's script announces (``views.page_view``) are page
views; the other requests of those libraries are a page's own requests. Each moves its reader,
and counts one hit, as a page view does; none is counted twice."""

from __future__ import annotations

import html
import json
import re
from typing import TYPE_CHECKING, Any

import pytest
from django.http import HttpRequest, HttpResponse
from django.template import engines
from django.urls import include, path

import whos_online
from tests.support.helpers import client_of, configure
from whos_online.api import OnlineCounts
from whos_online.recording import throttle

if TYPE_CHECKING:
    from django.test import Client

pytestmark = pytest.mark.urls(__name__)

TOPIC_1 = "topic:1"
TOPIC_2 = "topic:2"
PAGE = engines["django"].from_string(
    "{% load whos_online %}<main>{{ title }}</main>{% whos_online live=True here=True %}"
)


def topic(request: HttpRequest, pk: int) -> HttpResponse:
    return HttpResponse(PAGE.render({"title": f"topic {pk}"}, request))


def index(request: HttpRequest) -> HttpResponse:
    return HttpResponse(PAGE.render({"title": "index"}, request))


def reply(request: HttpRequest, pk: int) -> HttpResponse:
    """A form's POST, answered by a redirect that the library follows with the same headers."""
    return HttpResponse(status=303, headers={"Location": f"/topic/{pk}/"})


urlpatterns = [
    path("", index, name="index"),
    path("topic/<int:pk>/", topic, name="topic"),
    path("reply/<int:pk>/", reply, name="reply"),
    path("online/", include("whos_online.urls")),
]

PAGE_VIEW: dict[str, Any] = {"HTTP_SEC_FETCH_DEST": "document", "HTTP_SEC_FETCH_MODE": "navigate"}
#: A script's request, as the browser describes it.
FETCH: dict[str, Any] = {
    "HTTP_SEC_FETCH_DEST": "empty",
    "HTTP_SEC_FETCH_MODE": "cors",
    "HTTP_SEC_FETCH_SITE": "same-origin",
}
TURBO_8: dict[str, Any] = {
    **FETCH,
    "HTTP_ACCEPT": "text/html, application/xhtml+xml",
    "HTTP_X_TURBO_REQUEST_ID": "6b3f2c1e-0000-4000-8000-000000000001",
}
#: The navigations the libraries make, by the headers they send with them.
NAVIGATIONS: dict[str, dict[str, Any]] = {
    "htmx-boosted": {**FETCH, "HTTP_HX_REQUEST": "true", "HTTP_HX_BOOSTED": "true"},
    "htmx-boosted-without-fetch-metadata": {"HTTP_HX_REQUEST": "true", "HTTP_HX_BOOSTED": "true"},
    "htmx-history-restore": {
        **FETCH,
        "HTTP_HX_REQUEST": "true",
        "HTTP_HX_HISTORY_RESTORE_REQUEST": "true",
    },
    "htmx-1-history-restore": {**FETCH, "HTTP_HX_HISTORY_RESTORE_REQUEST": "true"},
    "turbo-8": TURBO_8,
    "turbo-8-form-redirected": {
        **TURBO_8,
        "HTTP_ACCEPT": "text/vnd.turbo-stream.html, text/html, application/xhtml+xml",
    },
    "turbo-7": {**FETCH, "HTTP_ACCEPT": "text/html, application/xhtml+xml"},
}
#: Their other requests, and Unpoly's, which say nothing of changing the address.
PAGES_OWN: dict[str, dict[str, Any]] = {
    "htmx": {**FETCH, "HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "main"},
    "htmx-without-fetch-metadata": {"HTTP_HX_REQUEST": "true", "HTTP_HX_TARGET": "main"},
    "turbo-frame": {**TURBO_8, "HTTP_TURBO_FRAME": "comments"},
    "turbo-frame-without-fetch-metadata": {
        "HTTP_ACCEPT": "text/html, application/xhtml+xml",
        "HTTP_TURBO_FRAME": "comments",
    },
    "turbo-8-prefetch": {**TURBO_8, "HTTP_X_SEC_PURPOSE": "prefetch"},
    "turbo-8-fetch": {**FETCH, "HTTP_X_TURBO_REQUEST_ID": "6b3f2c1e-0000-4000-8000-000000000002"},
    "unpoly": {
        **FETCH,
        "HTTP_X_UP_VERSION": "3.14.2",
        "HTTP_X_UP_TARGET": "main",
        "HTTP_X_UP_MODE": "root",
    },
    "unpoly-without-fetch-metadata": {
        "HTTP_X_UP_VERSION": "3.14.2",
        "HTTP_X_UP_TARGET": "main",
        "HTTP_X_UP_MODE": "root",
    },
}

GUEST = OnlineCounts(users=0, guests=1, bots=0, total=1)
NOBODY = OnlineCounts(users=0, guests=0, bots=0, total=0)


@pytest.fixture(autouse=True)
def _rooms(settings) -> None:
    configure(settings, ROOMS={"topic": "topic:{pk}"}, COUNT_HITS=True)


def counts(room: str | None = None) -> OnlineCounts:
    return whos_online.online_counts(room=room)


def hits() -> int:
    whos_online.flush()  # a hit without a visit to write waits in the process for its flush
    return sum(count for _, count in whos_online.get_counter("hits", 86400))


def attribute(markup: str, name: str) -> str | None:
    found = re.search(rf'{name}(?:="([^"]*)")?[ >]', markup)
    return None if found is None else html.unescape(found.group(1) or "")


def reader_in_topic_1() -> Client:
    reader = client_of()
    reader.get("/topic/1/", **PAGE_VIEW)
    assert counts(TOPIC_1) == GUEST
    assert hits() == 1
    return reader


# Told by the request's headers


@pytest.mark.parametrize("cookie", ["kept", "dropped"])
@pytest.mark.parametrize("headers", NAVIGATIONS.values(), ids=NAVIGATIONS)
def test_a_navigation_without_a_reload_moves_its_reader_and_counts_one_hit(
    backend, headers, cookie
):
    reader = reader_in_topic_1()
    if cookie == "dropped":
        reader.cookies.pop(throttle.COOKIE_NAME)

    page = reader.get("/topic/2/", **headers)

    assert page.status_code == 200
    assert counts(TOPIC_1) == NOBODY
    assert counts(TOPIC_2) == GUEST
    assert counts() == GUEST
    assert hits() == 2
    # The page says it was taken as a page view, so that its script does not announce it again.
    assert attribute(page.content.decode(), "data-whos-online-viewed")


@pytest.mark.parametrize("headers", NAVIGATIONS.values(), ids=NAVIGATIONS)
def test_a_navigation_to_a_page_in_no_room_takes_its_reader_out(backend, headers):
    reader = reader_in_topic_1()

    reader.get("/", **headers)

    assert counts(TOPIC_1) == NOBODY
    assert counts() == GUEST
    assert hits() == 2


def test_a_boosted_form_s_redirect_moves_nobody_and_the_page_it_leads_to_does(backend):
    reader = reader_in_topic_1()
    headers = NAVIGATIONS["htmx-boosted"]

    assert reader.post("/reply/2/", **headers).status_code == 303
    assert counts(TOPIC_1) == GUEST
    reader.get("/topic/2/", **headers)  # followed by the library, with the same headers

    assert counts(TOPIC_2) == GUEST
    assert hits() == 2


@pytest.mark.parametrize("cookie", ["kept", "dropped"])
@pytest.mark.parametrize("headers", PAGES_OWN.values(), ids=PAGES_OWN)
def test_a_library_s_other_requests_move_nobody_and_count_no_hit(backend, headers, cookie):
    reader = reader_in_topic_1()
    if cookie == "dropped":
        reader.cookies.pop(throttle.COOKIE_NAME)

    page = reader.get("/topic/2/", **headers)

    assert page.status_code == 200
    assert counts(TOPIC_1) == GUEST
    assert counts(TOPIC_2) == NOBODY
    assert hits() == 1
    assert attribute(page.content.decode(), "data-whos-online-viewed") is None


# Announced by the page's script


def presence_of(markup: str) -> str:
    found = attribute(markup, "data-whos-online-presence")
    assert found is not None
    return found


def announce(reader: Client, query: str = "", **headers: Any) -> Any:
    return reader.post(f"/online/page-view/{query}", **{**FETCH, **headers})


def token_query(reader: Client, pk: int) -> str:
    """The room and token of topic ``pk`` as the page's script has them: from the page's
    markup, fetched in the background (or from the site's own API)."""
    presence = presence_of(reader.get(f"/topic/{pk}/", **FETCH).content.decode())
    return presence[presence.index("?") :]


@pytest.mark.parametrize("cookie", ["kept", "dropped"])
def test_a_page_view_the_page_announces_moves_its_reader_and_counts_one_hit(backend, cookie):
    reader = reader_in_topic_1()
    query = token_query(reader, 2)  # moves nobody
    assert counts(TOPIC_1) == GUEST
    if cookie == "dropped":
        reader.cookies.pop(throttle.COOKIE_NAME)

    answer = announce(reader, query)

    assert answer.status_code == 200
    assert counts(TOPIC_1) == NOBODY
    assert counts(TOPIC_2) == GUEST
    assert hits() == 2
    # What the page needs to keep its reader present there, as a room's widget does.
    document = json.loads(answer.content)
    assert document["presence"].startswith(f"/online/presence/?room={TOPIC_2.replace(':', '%3A')}")
    assert document["stay"] >= 1
    assert reader.post(document["presence"], **FETCH).status_code == 204


def test_a_page_view_announced_in_no_room_takes_its_reader_out(backend):
    reader = reader_in_topic_1()

    answer = announce(reader)

    assert answer.status_code == 200
    assert json.loads(answer.content) == {}
    assert counts(TOPIC_1) == NOBODY
    assert counts() == GUEST
    assert hits() == 2


def test_a_page_view_announced_again_in_the_same_room_writes_nothing(backend, redis_calls):
    """As a reload: a hit, and no write within THROTTLE."""
    reader = reader_in_topic_1()
    query = token_query(reader, 1)
    redis_calls.clear()

    announce(reader, query)
    announce(reader, query)

    assert redis_calls.trips == []
    assert hits() == 3


@pytest.mark.parametrize(
    ("query", "headers", "status"),
    [
        (f"?room={TOPIC_2}", {}, 403),  # no token: a room the page was not shown
        (f"?room={TOPIC_2}&token=forged", {}, 403),
        ("?room=", {}, 400),
        ("", {"HTTP_SEC_FETCH_SITE": "cross-site"}, 403),  # another site's page
        ("", {"HTTP_SEC_FETCH_SITE": "none", "HTTP_ORIGIN": "https://elsewhere.example"}, 403),
    ],
    ids=["no-token", "forged-token", "empty-room", "cross-site", "typed-elsewhere"],
)
def test_only_the_site_s_own_pages_announce_a_page_view_and_only_of_a_room_they_showed(
    backend, query, headers, status
):
    reader = reader_in_topic_1()

    assert announce(reader, query, **headers).status_code == status

    assert counts(TOPIC_1) == GUEST
    assert counts(TOPIC_2) == NOBODY
    assert hits() == 1


def test_a_page_view_is_announced_with_a_post(backend):
    reader = reader_in_topic_1()

    assert reader.get("/online/page-view/", **FETCH).status_code == 405
    assert hits() == 1


def test_another_readers_token_does_not_open_the_room(backend, alice):
    query = token_query(client_of(alice), 2)
    reader = reader_in_topic_1()

    assert announce(reader, query).status_code == 403
    assert counts(TOPIC_2) == NOBODY


# The mark on the page


def test_only_a_page_view_s_widgets_carry_its_mark(backend):
    reader = client_of()
    page = reader.get("/topic/1/", **PAGE_VIEW).content.decode()
    again = reader.get("/topic/1/", **PAGE_VIEW).content.decode()
    fragment = reader.get("/topic/1/", **FETCH).content.decode()

    mark = attribute(page, "data-whos-online-viewed")
    assert mark
    assert attribute(again, "data-whos-online-viewed") not in {None, mark}  # one per request
    assert attribute(fragment, "data-whos-online-viewed") is None
    assert attribute(page, "data-whos-online-page-view") == "/online/page-view/"
    assert attribute(page, "data-whos-online-navigations") is None


def test_navigations_true_asks_the_page_to_announce_its_navigations(backend):
    markup = (
        engines["django"]
        .from_string("{% load whos_online %}{% whos_online live=True navigations=True %}")
        .render({})
    )

    assert attribute(markup, "data-whos-online-navigations") == ""
