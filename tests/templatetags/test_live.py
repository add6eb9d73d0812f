"""``{% whos_online live=True %}``: the rendered state and where live.js refreshes it from."""

from __future__ import annotations

import html
import logging
import re
import time
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.middleware import AuthenticationMiddleware
from django.contrib.sessions.middleware import SessionMiddleware
from django.core.exceptions import ImproperlyConfigured
from django.http import HttpResponse
from django.template import TemplateSyntaxError
from django.test import RequestFactory
from django.utils import translation

import whos_online
from tests.support.helpers import client_of, configure, render, widget_text
from whos_online.templatetags import whos_online as tags

if TYPE_CHECKING:
    from django.contrib.auth.models import AbstractUser

LIVE = "{% load whos_online %}{% whos_online live=True %}"
WIDGET = "/online/widget/"
#: The widget URL's query for the tag's defaults, on the test site (in American English).
DEFAULTS = "peak=1&visitors=0&refresh=30&lang=en-us"
HOSTILE = '<b onmouseover="x()">&amp;</b>'


def attribute(markup: str, name: str) -> str:
    found = re.search(rf'{name}="([^"]*)"', markup)
    assert found, name
    return html.unescape(found.group(1))


def populate(alice: AbstractUser) -> None:
    """alice, then a guest and a bot: milliseconds apart, so that they fall on one UTC day."""
    now = time.time()
    whos_online.record_user(alice, now=now - 0.010)
    whos_online.record_guest("198.51.100.1", now=now - 0.005)
    whos_online.record_guest("198.51.100.2", bot=True, now=now - 0.005)


def widget_on_page(user: AbstractUser | None) -> str:
    """What the widget reads on the test site's live page, for ``user`` or an anonymous visitor.

    The page's own visit is recorded after it is rendered; the page counts its viewer in.
    """
    markup = client_of(user).get("/live/").content.decode()
    found = re.search(r'<div class="whos-online".*?</div>', markup, flags=re.S)
    assert found
    return widget_text(found.group(0))


def lazy_request(*, session_cookie: bool) -> Any:
    """A request as the session and authentication middleware leave it: nothing loaded yet."""
    factory = RequestFactory()
    if session_cookie:
        factory.cookies["sessionid"] = "some-session-key"
    request = factory.get("/")
    SessionMiddleware(lambda request: HttpResponse()).process_request(request)
    AuthenticationMiddleware(lambda request: HttpResponse()).process_request(request)
    return request


def test_live_widget_carries_the_widget_url_interval_and_script(backend):
    markup = render(LIVE)

    assert attribute(markup, "data-whos-online-live") == f"{WIDGET}?{DEFAULTS}"
    assert attribute(markup, "data-whos-online-refresh") == "30"
    assert (
        '<script src="/static/whos_online/live.js" data-whos-online-script defer></script>'
        '<script src="/online/live-check.js" defer></script>'
    ) in markup
    assert widget_text(markup) == "Who's online: nobody"


def test_the_script_that_says_live_js_did_not_load_is_served_by_whos_online(backend):
    """Where the site's static files may not be (under ASGI, Django serves none), and kept by
    the browser for a day; fetching it records nobody."""
    response = client_of().get("/online/live-check.js", HTTP_SEC_FETCH_DEST="script")

    assert response.status_code == 200
    assert response["Content-Type"] == "text/javascript; charset=utf-8"
    assert "public" in response["Cache-Control"]
    assert "max-age=86400" in response["Cache-Control"]
    body = response.content.decode()
    assert "window.whosOnlineLive" in body
    assert "console.warn" in body
    assert whos_online.online_counts().total == 0


def test_the_widget_url_carries_the_tag_arguments_and_the_page_language(backend, settings):
    settings.LANGUAGES = [("en", "English"), ("fr", "French")]
    source = "{% load whos_online %}{% whos_online peak=False visitors=True refresh=7 %}"

    with translation.override("fr"):
        markup = render(source)

    url = attribute(markup, "data-whos-online-live")
    assert url == f"{WIDGET}?peak=0&visitors=1&refresh=7&lang=fr"
    # What the page shows is what the widget view renders for that URL.
    assert client_of().get(url).content.decode() == markup


def test_a_room_and_the_site_refresh_together(backend, alice, bob):
    whos_online.record_user(bob)
    whos_online.record_user(alice, room="topic:1")
    source = '{% load whos_online %}{% whos_online live=True room="topic:1" site=True %}'

    markup = render(source)

    url = attribute(markup, "data-whos-online-live")
    assert url.startswith(f"{WIDGET}?{DEFAULTS}&room=topic%3A1&token=")
    assert url.endswith("&site=1")
    assert attribute(markup, "data-whos-online-widgets") == "/online/widgets/"
    refreshed = client_of().get(url).content.decode()
    assert widget_text(refreshed) == widget_text(markup) == "Here now: 1 user Who's online: 2 users"
    assert attribute(refreshed, "data-whos-online-live") == url


def test_the_static_widget_has_none_of_it(backend):
    markup = render("{% load whos_online %}{% whos_online %}")

    assert "data-whos-online" not in markup
    assert "<script" not in markup


def test_refresh_sets_the_interval_and_implies_live(backend, settings):
    configure(settings, REFRESH_INTERVAL=12)
    assert attribute(render(LIVE), "data-whos-online-refresh") == "12"
    markup = render("{% load whos_online %}{% whos_online refresh=5 %}")
    assert attribute(markup, "data-whos-online-refresh") == "5"


@pytest.mark.parametrize("value", ["0", "-1", "'5'", "1.5", "True"])
def test_refresh_must_be_a_positive_whole_number(backend, value):
    with pytest.raises(TemplateSyntaxError, match="refresh= takes a whole number"):
        render(f"{{% load whos_online %}}{{% whos_online refresh={value} %}}")


@pytest.mark.usefixtures("mid_utc_day")  # counts today's visitors
def test_anonymous_visitors_get_counts_not_names(backend, alice):
    populate(alice)

    # (widget_text() leaves out the peak line.) The viewer is the second guest.
    assert (
        widget_on_page(None) == "Who's online: 1 user, 2 guests and 1 bot 2 unique visitors today"
    )


def test_staff_get_names(backend, alice, staff):
    populate(alice)

    # The viewer first, as the one seen last.
    assert widget_on_page(staff).startswith("Who's online: sam, alice, 1 guest and 1 bot 2 unique")


def test_names_follow_show_names_to(backend, settings, alice, bob):
    configure(settings, SHOW_NAMES_TO="authenticated")
    populate(alice)

    assert widget_on_page(None).startswith("Who's online: 1 user, 2 guests and 1 bot")
    # The anonymous visit just made was recorded after its page, which counted it in.
    assert widget_on_page(bob).startswith("Who's online: bob, alice, 2 guests and 1 bot")


def test_names_for_everyone_need_no_request(backend, settings, alice):
    configure(settings, SHOW_NAMES_TO="everyone")
    populate(alice)

    assert widget_text(render(LIVE, request=RequestFactory().get("/"))).startswith(
        "Who's online: alice,"
    )


def test_without_a_session_cookie_the_session_is_left_alone(backend, alice):
    """So that the tag does not make a cacheable page vary on the cookie."""
    populate(alice)
    request = lazy_request(session_cookie=False)

    assert widget_text(render(LIVE, request=request)).startswith("Who's online: 1 user, 1 guest")
    assert request.session.accessed is False


def test_with_a_session_cookie_the_user_is_looked_at(backend, alice):
    populate(alice)
    request = lazy_request(session_cookie=True)

    render(LIVE, request=request)

    assert request.session.accessed is True


def test_the_static_widget_never_looks_at_the_user(backend, alice):
    populate(alice)
    request = lazy_request(session_cookie=True)

    assert widget_text(
        render("{% load whos_online %}{% whos_online %}", request=request)
    ).startswith("Who's online: alice, 1 guest")
    assert request.session.accessed is False


def test_names_are_escaped(backend, settings, db):
    configure(settings, SHOW_NAMES_TO="everyone")
    whos_online.record_user(get_user_model().objects.create_user(HOSTILE))

    markup = render(LIVE)

    assert "<b " not in markup
    assert HOSTILE in widget_text(markup)


def test_renders_the_static_state_while_redis_is_down(redis_down):
    markup = render(LIVE)

    assert widget_text(markup) == "Who's online: nobody"
    assert attribute(markup, "data-whos-online-live") == f"{WIDGET}?{DEFAULTS}"


def test_without_the_urls_debug_says_what_to_add(backend, settings):
    settings.ROOT_URLCONF = "tests.urls_without_app"
    settings.DEBUG = True

    with pytest.raises(ImproperlyConfigured, match=r'include\("whos_online.urls"\)'):
        render(LIVE)


def test_without_the_urls_production_shows_the_static_widget_and_logs_once(
    backend, settings, caplog, monkeypatch
):
    monkeypatch.setattr(tags, "_unmounted_logged", False)
    settings.ROOT_URLCONF = "tests.urls_without_app"
    caplog.set_level(logging.WARNING, logger="whos_online")

    first: Any = render(LIVE)
    render(LIVE)

    assert "data-whos-online" not in first
    assert widget_text(first) == "Who's online: nobody"
    assert len(caplog.records) == 1
    assert "whos_online.urls is not in the URLconf" in caplog.records[0].getMessage()


def test_without_the_urls_names_are_still_kept_from_those_not_allowed(backend, settings, alice):
    settings.ROOT_URLCONF = "tests.urls_without_app"
    populate(alice)

    markup = render(LIVE, request=lazy_request(session_cookie=False))

    assert "data-whos-online" not in markup
    assert widget_text(markup).startswith("Who's online: 1 user, 1 guest and 1 bot")
    assert "alice" not in markup
