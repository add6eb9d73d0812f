"""Rooms on a CMS: every page served by one catch-all view that captures its path by position,
private pages behind a password or a login, and titles for the dashboard.

The views below stand for a CMS such as Wagtail or django CMS: ``serve`` resolves a page from
its path, runs the site's hooks before serving it (the way Wagtail runs ``before_serve_page``),
and answers a page's password form, or a redirect to the login page, in place of a private
page's content. ``room_hook`` is the recipe of docs/rooms-on-any-site.md.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from django.core.management import call_command
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect
from django.template import engines
from django.test import Client
from django.urls import include, path, re_path

import whos_online
from tests.support.helpers import configure
from whos_online import dashboard
from whos_online.api import OnlineCounts
from whos_online.checks import check_room_urls
from whos_online.config.settings import get_config
from whos_online.store import snapshot

pytestmark = pytest.mark.urls(__name__)

#: path -> (pk, title, restriction): None, "password" or "login".
PAGES: dict[str, tuple[int, str, str | None]] = {
    "": (1, "Home", None),
    "about-us/": (2, "About us", None),
    "blog/post-1/": (3, "Post 1", None),
    "secret/": (4, "Secret", "password"),
    "members/": (5, "Members", "login"),
}
PASSWORD = "secret"
PAGE = engines["django"].from_string(
    "{% load whos_online %}<main>{{ title }}</main>{% whos_online here=True peak=False %}"
)
FORM = engines["django"].from_string(
    '{% load whos_online %}<form method="post"><input name="password"></form>'
    "{% whos_online here=True peak=False %}"
)
PAGE_VIEW: dict[str, Any] = {"HTTP_SEC_FETCH_DEST": "document", "HTTP_SEC_FETCH_MODE": "navigate"}
GUEST = OnlineCounts(users=0, guests=1, bots=0, total=1)
NOBODY = OnlineCounts(users=0, guests=0, bots=0, total=0)


def accepts(request: HttpRequest, restriction: str | None) -> bool:
    """Whether a page's view restriction lets ``request`` see its content."""
    if restriction == "password":
        return request.COOKIES.get("page-password") == PASSWORD
    if restriction == "login":
        return bool(request.user.is_authenticated)
    return True


#: The site's hooks, run before a page is served, as a CMS runs them (set by each test).
HOOKS: list[Any] = []


def room_hook(page: tuple[int, str, str | None], request: HttpRequest) -> None:
    """The recipe: a page's room and title once its content is shown, no room otherwise."""
    pk, title, restriction = page
    if accepts(request, restriction):
        whos_online.set_room(request, f"page:{pk}", title=title)
    else:
        whos_online.set_room(request, None)  # a password or login form, not the page


def serve(request: HttpRequest, page_path: str) -> HttpResponse:
    page = PAGES.get(page_path)
    if page is None:
        raise Http404("no such page")
    for hook in HOOKS:
        hook(page, request)
    _pk, title, restriction = page
    if not accepts(request, restriction):
        if restriction == "login":
            return redirect(f"/login/?next=/{page_path}")
        return HttpResponse(FORM.render({}, request))
    return HttpResponse(PAGE.render({"title": title}, request))


def page_room(request: HttpRequest) -> tuple[str, str] | None:
    """A ``ROOMS`` function: the room and title of the page the catch-all resolved, if any."""
    assert request.resolver_match is not None
    page = PAGES.get(request.resolver_match.args[0])
    if page is None or not accepts(request, page[2]):
        return None
    return f"page:{page[0]}", page[1]


urlpatterns = [
    path("online/", include("whos_online.urls")),
    re_path(r"^((?:[\w\-]+/)*)$", serve, name="cms_serve"),
]


@pytest.fixture(autouse=True)
def no_hooks():
    yield
    HOOKS.clear()


def counts(room: str) -> OnlineCounts:
    return whos_online.online_counts(room=room)


def shown(response: Any) -> str:
    """The page's text, tags left out."""
    return " ".join(re.sub(r"<[^>]+>", " ", response.content.decode()).split())


def test_a_catch_all_url_s_positional_capture_names_the_room(backend, settings):
    configure(settings, ROOMS={"cms_serve": "page:{0}"})
    assert check_room_urls() == []

    Client().get("/about-us/", **PAGE_VIEW)

    assert counts("page:about-us/") == GUEST


def test_a_positional_capture_the_url_does_not_have_is_an_error(settings):
    configure(settings, ROOMS={"cms_serve": "page:{1}"})
    assert [message.id for message in check_room_urls()] == ["whos_online.E032"]


def test_a_rooms_function_names_the_page_the_cms_resolved_and_its_title(backend, settings, r):
    configure(settings, ROOMS={"cms_serve": {"call": "tests.recording.test_cms_rooms.page_room"}})
    assert check_room_urls() == []
    reader = Client()

    assert shown(reader.get("/about-us/", **PAGE_VIEW)).startswith("About us Here now: 1 guest")

    assert counts("page:2") == GUEST
    assert snapshot.room_titles(r, get_config(), ["page:2"]) == {"page:2": "About us"}
    assert reader.get("/nowhere/", **PAGE_VIEW).status_code == 404


def test_a_title_pattern_names_the_room_for_people(backend, settings, staff):
    configure(settings, ROOMS={"cms_serve": {"room": "page:{0}", "title": "Page /{0}"}})

    Client().get("/blog/post-1/", **PAGE_VIEW)

    shown_rooms = dashboard.collect(60, now=time.time()).rooms
    assert [(room.name, room.title) for room in shown_rooms] == [
        ("page:blog/post-1/", "Page /blog/post-1/")
    ]


def test_a_visitor_shown_a_private_page_s_password_form_is_not_in_its_room(backend, settings):
    """The hook runs before the page's restrictions are applied, as Wagtail's does; the recipe
    asks them itself, so the form's viewer is in no room (and out of the one they were in)."""
    configure(settings, ROOMS={"cms_serve": "page:{0}"})  # the hook wins over it
    HOOKS.append(room_hook)
    reader = Client()
    reader.get("/about-us/", **PAGE_VIEW)
    assert counts("page:2") == GUEST

    form = reader.get("/secret/", **PAGE_VIEW)

    assert form.status_code == 200
    assert "<form" in form.content.decode()
    assert counts("page:4") == NOBODY
    assert counts("page:secret/") == NOBODY
    assert counts("page:2") == NOBODY  # a page view in no room took them out
    reader.cookies["page-password"] = PASSWORD
    reader.get("/secret/", **PAGE_VIEW)  # the content, at last
    assert counts("page:4") == GUEST


def test_a_visitor_sent_to_the_login_page_is_not_in_the_room(backend, settings, alice):
    HOOKS.append(room_hook)
    reader = Client()

    assert reader.get("/members/", **PAGE_VIEW).status_code == 302

    assert counts("page:5") == NOBODY
    reader.force_login(alice)
    reader.get("/members/", **PAGE_VIEW)
    assert counts("page:5") == OnlineCounts(users=1, guests=0, bots=0, total=1)


def test_the_cleanup_forgets_the_titles_of_rooms_it_emptied(backend, r, monkeypatch):
    HOOKS.append(room_hook)
    Client().get("/about-us/", **PAGE_VIEW)
    Client(REMOTE_ADDR="192.0.2.9").get("/blog/post-1/", **PAGE_VIEW)
    config = get_config()
    assert snapshot.room_titles(r, config, ["page:2", "page:3"]) == {
        "page:2": "About us",
        "page:3": "Post 1",
    }

    call_command("whos_online_cleanup", verbosity=0)  # nobody stale yet: the titles stay
    assert snapshot.room_titles(r, config, ["page:2", "page:3"]) == {
        "page:2": "About us",
        "page:3": "Post 1",
    }
    later = time.time() + config.window + 1
    monkeypatch.setattr(time, "time", lambda: later)
    Client(REMOTE_ADDR="192.0.2.9").get("/blog/post-1/", **PAGE_VIEW)  # page 3 stays busy
    call_command("whos_online_cleanup", verbosity=0)

    assert snapshot.room_titles(r, config, ["page:2", "page:3"]) == {"page:3": "Post 1"}


def test_a_title_comes_back_with_the_next_visitor_after_redis_lost_its_data(backend, r):
    HOOKS.append(room_hook)
    reader = Client()
    reader.get("/about-us/", **PAGE_VIEW)
    r.flushdb()  # a restart without persistence
    whos_online.online_counts()  # the process learns of it

    reader.get("/about-us/", **PAGE_VIEW)  # written again: its cookie speaks of what was lost

    assert snapshot.room_titles(r, get_config(), ["page:2"]) == {"page:2": "About us"}
