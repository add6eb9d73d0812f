"""Navigations without a reload in Chromium: a single-page app's router announces its page views
through the live client (``whosOnline.pageView``), a page with ``navigations=True`` announces
its changes of address in the room of the page at the new address, and a navigation the server
took already (an htmx boost) is not announced again; each counts one hit. And the console says
once when the widget's script or its stream cannot be loaded.

The browser and the pages are tests/test_browser.py's (Chromium from Debian, a strict CSP, any
script error fails the test); the site is its live server (WSGI: the stream answers 204).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

import whos_online
from tests import test_browser
from tests.support.helpers import configure
from tests.test_browser import STREAM, TIMEOUT_MS, Sent, assert_not_reloaded, mark_page

if TYPE_CHECKING:
    from playwright.sync_api import ConsoleMessage, Page, Route

pytestmark = [
    pytest.mark.browser,
    pytest.mark.parametrize("backend", ["real"], indirect=True),
]

#: tests/test_browser.py's fixtures: its Chromium, its pages, its site on the live server.
browser, open_page, site = test_browser.browser, test_browser.open_page, test_browser.site
PAGE_VIEW = "/online/page-view/"


@pytest.fixture
def counting(site: str, settings: Any) -> str:
    configure(settings, REFRESH_INTERVAL=1, JSON_MAX_AGE=0, COUNT_HITS=True)
    return site


def hits() -> int:
    whos_online.flush()
    return sum(count for _, count in whos_online.get_counter("hits", 86400))


def users_in(room: str) -> int:
    return whos_online.online_counts(room=room).users


def decided(page: Page) -> None:
    """Have the page keep its next navigation's outcome (``window.whosOnlineTestOutcome``)."""
    page.evaluate(
        """() => {
            window.whosOnlineTestOutcome = new Promise(function (resolve) {
                document.addEventListener("whos-online:page-view", function (event) {
                    resolve(event.detail);
                }, { once: true });
            });
        }"""
    )


def outcome(page: Page) -> dict[str, Any] | None:
    """The outcome ``decided`` kept, or None if the page said none in time."""
    found: dict[str, Any] | None = page.evaluate(
        f"""() => Promise.race([
            window.whosOnlineTestOutcome,
            new Promise((resolve) => window.setTimeout(() => resolve(null), {TIMEOUT_MS})),
        ])"""
    )
    return found


def test_a_single_page_app_s_router_announces_its_page_views(counting, open_page, alice):
    page = open_page()
    page.goto(f"{counting}/login/alice/")
    sent = Sent(page)
    page.goto(f"{counting}/spa/1/")
    assert users_in("topic:1") == 1
    mark_page(page)
    first = hits()

    # The router shows topic 2, whose room and token the site's API gave it.
    announced = page.evaluate(
        """() => {
            var main = document.querySelector("main");
            history.pushState({}, "", "/spa/2/");
            var next = main.dataset;
            return whosOnline.pageView({room: next.nextRoom, token: next.nextToken});
        }"""
    )

    assert announced is True
    assert users_in("topic:2") == 1
    assert users_in("topic:1") == 0
    assert hits() == first + 1
    assert sent.to(PAGE_VIEW, method="POST") == 1
    # On its first page, the router's word for the page the server served is not counted again.
    page.evaluate('history.pushState({}, "", "/spa/1/")')
    assert page.evaluate("whosOnline.pageView({room: null})") is True  # a page in no room
    assert users_in("topic:2") == 0
    assert hits() == first + 2
    assert_not_reloaded(page)


def test_the_router_s_word_for_the_page_the_server_served_counts_nothing_more(
    counting, open_page, alice
):
    page = open_page()
    page.goto(f"{counting}/login/alice/")
    sent = Sent(page)
    page.goto(f"{counting}/spa/1/")
    first = hits()

    assert page.evaluate("whosOnline.pageView()") is False  # the server took it

    assert hits() == first
    assert sent.to(PAGE_VIEW, method="POST") == 0
    assert users_in("topic:1") == 1


def test_navigations_true_announces_each_change_of_address_once(counting, open_page, alice):
    """No widget comes with the new address (the page's script rendered it): the live client
    fetches the page at that address in the background for its room, its widget takes its
    URLs and content, and the reader moves there; the back button moves them back."""
    page = open_page()
    page.goto(f"{counting}/login/alice/")
    sent = Sent(page)
    page.goto(f"{counting}/spa-following/1/")
    widget = page.locator(".whos-online")
    assert users_in("topic:1") == 1
    mark_page(page)
    first = hits()

    decided(page)
    page.evaluate('history.pushState({}, "", "/spa-following/2/")')
    assert outcome(page) == {"url": "/spa-following/2/", "announced": True}

    assert users_in("topic:2") == 1
    assert users_in("topic:1") == 0
    assert hits() == first + 1
    assert "topic%3A2" in (widget.get_attribute("data-whos-online-presence") or "")
    assert sent.to(PAGE_VIEW, method="POST") == 1
    assert sent.renewals("/spa-following/2/") == 1  # the page fetched for its room

    decided(page)
    page.go_back()
    assert outcome(page) == {"url": "/spa-following/1/", "announced": True}
    assert users_in("topic:1") == 1
    assert hits() == first + 2

    decided(page)
    page.evaluate('history.pushState({}, "", "/spa-following/")')  # a page in no room
    assert outcome(page) == {"url": "/spa-following/", "announced": True}
    assert users_in("topic:1") == 0
    assert whos_online.online_counts().users == 1
    # A change of the query kept by replaceState, or of the hash, is no navigation.
    page.evaluate('history.replaceState({}, "", "/spa-following/?sort=new"); location.hash = "x"')
    assert sent.to(PAGE_VIEW, method="POST") == 3
    assert hits() == first + 3
    assert_not_reloaded(page)


#: What htmx does for a boosted link: it fetches the page (the server takes it as a page view),
#: pushes its address, then swaps its body in (no script of it runs: the live client finds the
#: new widget by itself).
BOOST = """async (path) => {
    var response = await fetch(path, {headers: {"HX-Request": "true", "HX-Boosted": "true"}});
    var html = await response.text();
    history.pushState({}, "", path);
    var fresh = new DOMParser().parseFromString(html, "text/html");
    document.body.replaceChildren(...Array.from(fresh.body.childNodes).filter(
        (node) => node.nodeName !== "SCRIPT"
    ));
}"""


def test_a_boosted_navigation_is_counted_once(counting, open_page, alice):
    page = open_page()
    page.goto(f"{counting}/login/alice/")
    sent = Sent(page)
    page.goto(f"{counting}/spa-following/1/")
    mark_page(page)
    first = hits()

    decided(page)
    page.evaluate(BOOST, "/spa-following/2/")

    assert outcome(page) == {"url": "/spa-following/2/", "announced": False}
    assert users_in("topic:2") == 1
    assert users_in("topic:1") == 0
    assert hits() == first + 1
    assert sent.to(PAGE_VIEW, method="POST") == 0
    assert sent.renewals("/spa-following/2/") == 0
    # The new page's widget keeps its reader there, and leaves with them.
    expect(page.locator(".whos-online-label")).to_have_text("Here now:")
    assert_not_reloaded(page)


def test_a_room_whose_widget_left_the_page_is_no_longer_spoken_for(counting, open_page, alice):
    """A boosted navigation to a page in no room swaps the room's widget out: its "still here"
    stops, and does not put its reader back in the room they left."""
    page = open_page()
    page.clock.install()
    page.goto(f"{counting}/login/alice/")
    sent = Sent(page)
    page.goto(f"{counting}/spa-following/1/")
    assert users_in("topic:1") == 1

    page.evaluate(BOOST, "/spa-following/")
    expect(page.locator(".whos-online-label")).to_have_text("Who's online:")
    assert users_in("topic:1") == 0
    for _ in range(3):  # three times the room's interval of "still here"
        page.clock.run_for(130_000)
    settle(page)

    assert sent.to("/online/presence/", method="POST") == 0
    assert users_in("topic:1") == 0
    assert whos_online.online_counts().users == 1


# The console


def warnings_of(page: Page) -> list[str]:
    found: list[str] = []

    def note(message: ConsoleMessage) -> None:
        if message.type == "warning" and "whos_online" in message.text:
            found.append(message.text)

    page.on("console", note)
    return found


def is_warning(message: ConsoleMessage) -> bool:
    return message.type == "warning" and "whos_online" in message.text


def settle(page: Page) -> None:
    """Let the page deliver what its last answer set off (a warning is written a task later)."""
    page.evaluate("() => new Promise((resolve) => window.setTimeout(resolve, 100))")


def test_the_console_says_once_that_the_widget_s_script_did_not_load(site, open_page):
    open_page.allow("404")  # the browser's own word for the missing file
    page = open_page()
    page.route("**/static/whos_online/live.js", lambda route: route.fulfill(status=404))
    warnings = warnings_of(page)

    with page.expect_console_message(is_warning) as said:
        page.goto(f"{site}/three/1/")  # three widgets, each with its script tags
    settle(page)

    assert warnings == [said.value.text]
    assert "did not load from" in warnings[0]
    assert "/static/whos_online/live.js" in warnings[0]
    assert "static files" in warnings[0]


def test_the_page_says_nothing_when_the_script_loads(site, open_page):
    page = open_page()
    warnings = warnings_of(page)
    page.goto(f"{site}/three/1/")
    page.wait_for_function("() => window.whosOnlineLiveCheck === true && !!window.whosOnline")
    settle(page)

    assert warnings == []


def refuse_stream(route: Route) -> None:
    route.fulfill(status=503, body="busy", headers={"Retry-After": "1"})


def is_stream(request: Any) -> bool:
    return bool(urlsplit(request.url).path == STREAM and request.resource_type == "eventsource")


def test_the_console_says_once_that_the_stream_could_not_be_opened(site, open_page, settings):
    configure(settings, REFRESH_INTERVAL=1, JSON_MAX_AGE=0, LIVE_UPDATES=True)
    open_page.allow("503")
    page = open_page()
    page.clock.install()
    page.route(f"**{STREAM}**", refuse_stream)
    warnings = warnings_of(page)
    tries: list[object] = []
    page.on("request", lambda request: tries.append(request) if is_stream(request) else None)

    with page.expect_console_message(is_warning) as said:
        page.goto(f"{site}/live/")
    for more in range(1, 4):  # three more tries, 5, 10 and 20 s after each failure
        # A second of the page's clock at a time, with a moment for the page to take in the
        # last refusal and set its next try: running 40 s at once could pass before it had.
        for _ in range(60):
            if len(tries) > more:
                break
            page.clock.run_for(1000)
            page.wait_for_timeout(50)
        assert len(tries) > more
    settle(page)

    assert warnings == [said.value.text]
    assert "could not be opened: it answered 503" in warnings[0]


def test_a_stream_the_server_does_not_offer_is_no_warning(site, open_page, settings):
    """Under WSGI the stream view answers 204 and the page polls, as it should."""
    configure(settings, REFRESH_INTERVAL=1, JSON_MAX_AGE=0, LIVE_UPDATES=True)
    page = open_page()
    warnings = warnings_of(page)

    # The page asks once why the stream failed: 204, so it says nothing.
    with page.expect_response(
        lambda response: (
            urlsplit(response.url).path == STREAM and response.request.resource_type == "fetch"
        )
    ) as asked:
        page.goto(f"{site}/live/")
    settle(page)

    assert asked.value.status == 204
    assert warnings == []
