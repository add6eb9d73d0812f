"""The live widget and the dashboard in a real browser: Debian's Chromium driven by Playwright.

The site is pytest-django's live server (in a thread of this process) on the real redis-server.
Without ``/usr/bin/chromium`` these tests are skipped; ``.ci/run`` installs the ``chromium``
package first, so that CI cannot pass by skipping them. Playwright's own browsers are never
downloaded.

Every page is served with a strict Content-Security-Policy, and any script error or console
error (a CSP violation included) fails the test. Waits are on the page's state, never on time.
"""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Literal
from urllib.parse import urlsplit

import pytest
from django.contrib.auth import get_user_model
from playwright.sync_api import expect, sync_playwright

import whos_online
from tests.support import wsgi_server
from tests.support.helpers import configure
from whos_online.recording import rooms, visits

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from django.contrib.auth.models import AbstractUser
    from django.http import HttpRequest
    from playwright.sync_api import Browser, BrowserContext, Locator, Page, Route
    from playwright.sync_api import Request as PlaywrightRequest

    from whos_online.config.settings import Config

CHROMIUM = Path("/usr/bin/chromium")
#: Headless, sandbox-free (CI containers run as root) and quiet: no network but the test site.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
ROOT = Path(__file__).resolve().parent.parent
#: Where the dashboard's screenshot goes (git-ignored); the README shows a copy, docs/dashboard.png.
SCREENSHOT = ROOT / ".artifacts" / "dashboard.png"
#: Headless Chromium says "HeadlessChrome", which BOT_USER_AGENTS counts as a bot, rightly: the
#: visitors of these tests present themselves as the desktop browser they stand for.
USER_AGENT = (
    "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) "
    "Chrome/130.0.0.0 Safari/537.36"
)
CSP = "default-src 'self'; base-uri 'none'; frame-ancestors 'none'"
#: Generous, for a busy CI machine: the refreshes run every second.
TIMEOUT_MS = 10_000

pytestmark = [
    pytest.mark.browser,
    pytest.mark.parametrize("backend", ["real"], indirect=True),
]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not CHROMIUM.exists():
        pytest.skip(
            f"the browser tests need Chromium at {CHROMIUM}: install the Debian package "
            "chromium (apt-get install chromium)"
        )
    with pytest.MonkeyPatch.context() as patch:
        # Playwright's sync API runs an asyncio loop in this thread while it is open, and Django
        # refuses ORM calls from a thread with a running loop. Here they are safe: this thread
        # only creates users and flushes the test database, between the browser's requests, which
        # the live server answers in a thread of its own. Only this module runs with the flag.
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as playwright:
            launched = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            yield launched
            launched.close()


@pytest.fixture
def site(live_server, backend, settings) -> str:
    """The test site on the real Redis, refreshing every second from answers never cached."""
    configure(settings, REFRESH_INTERVAL=1, JSON_MAX_AGE=0, SHOW_NAMES_TO="authenticated")
    return str(live_server.url)


class Pages:
    """Opens pages, each in a browser context of its own (its own cookies: another visitor);
    script and console errors on them fail the test, but those a test says it expects
    (``allow``), and the site's HTML answers get a strict CSP."""

    def __init__(self, browser: Browser) -> None:
        self.browser = browser
        self.contexts: list[BrowserContext] = []
        self.errors: list[str] = []
        self.allowed: list[str] = []

    def allow(self, text: str) -> None:
        """Expect console errors that contain ``text``."""
        self.allowed.append(text)

    def __call__(self, width: int = 1280, height: int = 800) -> Page:
        context = self.browser.new_context(
            viewport={"width": width, "height": height}, user_agent=USER_AGENT
        )
        context.set_default_timeout(TIMEOUT_MS)
        context.route(is_routed, with_csp)
        self.contexts.append(context)
        page = context.new_page()
        page.on("pageerror", lambda error: self.errors.append(f"{page.url}: {error}"))
        page.on(
            "console",
            lambda message: (
                self.errors.append(f"{page.url}: {message.text}")
                if message.type == "error" and not is_favicon(message.location["url"])
                else None
            ),
        )
        return page

    def unexpected_errors(self) -> list[str]:
        return [e for e in self.errors if not any(text in e for text in self.allowed)]


def is_favicon(url: str) -> bool:
    """The browser's own request for the site's icon, which the test site has not: Chromium
    logs its 404 on some pages and not on others, whatever the page does."""
    return urlsplit(url).path == "/favicon.ico"


#: The live stream's path: never routed, since a route's fetch reads the answer to its end, and a
#: stream has none.
STREAM = "/online/stream/"


def is_routed(url: str) -> bool:
    return urlsplit(url).path != STREAM


def with_csp(route: Route) -> None:
    response = route.fetch()
    headers = dict(response.headers)
    if headers.get("content-type", "").startswith("text/html"):
        headers["content-security-policy"] = CSP
    route.fulfill(response=response, headers=headers)


@pytest.fixture
def open_page(browser: Browser) -> Iterator[Pages]:
    pages = Pages(browser)
    yield pages
    for context in pages.contexts:
        # A refresh may still be in the route handler; once the context closes, fulfilling it
        # fails ("Request context disposed", microsoft/playwright#23781). It is of no interest.
        context.unroute_all(behavior="ignoreErrors")
        context.close()
    assert pages.unexpected_errors() == []


def widget_list(page: Page) -> Locator:
    return page.locator(".whos-online .whos-online-list")


def mark_page(page: Page) -> None:
    """Something a reload would lose: checked at the end, it shows the page was never reloaded."""
    page.evaluate("window.whosOnlineTestMark = true")


def assert_not_reloaded(page: Page) -> None:
    assert page.evaluate("window.whosOnlineTestMark") is True


def test_two_users_see_each_other_online(site, open_page, alice, bob):
    alices = open_page()
    alices.goto(f"{site}/login/alice/")
    alices.goto(f"{site}/live/")
    expect(widget_list(alices)).to_have_text("alice", timeout=TIMEOUT_MS)
    mark_page(alices)

    bobs = open_page()
    bobs.goto(f"{site}/login/bob/")
    bobs.goto(f"{site}/live/")

    # Newest first: bob logged in last. Each page shows the other without a reload.
    expect(widget_list(bobs)).to_have_text("bob and alice", timeout=TIMEOUT_MS)
    expect(widget_list(alices)).to_have_text("bob and alice", timeout=TIMEOUT_MS)
    expect(alices.locator(".whos-online")).to_have_attribute("data-users", "2")
    # Names the widget wrote itself are isolated like the server's, so that no name can
    # reverse the sentence around it.
    for name in alices.locator(".whos-online-user").all():
        expect(name).to_have_attribute("dir", "auto")
    assert_not_reloaded(alices)


def test_readers_of_a_topic_see_each_other_come_and_go(site, open_page, alice, bob):
    alices = open_page()
    alices.goto(f"{site}/login/alice/")
    alices.goto(f"{site}/topics/1/")
    expect(widget_list(alices)).to_have_text("alice", timeout=TIMEOUT_MS)
    mark_page(alices)

    bobs = open_page()
    bobs.goto(f"{site}/login/bob/")
    bobs.goto(f"{site}/topics/2/")  # another topic: alice's page does not list bob
    expect(widget_list(bobs)).to_have_text("bob", timeout=TIMEOUT_MS)
    bobs.goto(f"{site}/topics/1/")  # bob comes to alice's topic
    expect(widget_list(alices)).to_have_text("bob and alice", timeout=TIMEOUT_MS)
    expect(widget_list(bobs)).to_have_text("bob and alice", timeout=TIMEOUT_MS)

    bobs.goto(f"{site}/topics/2/")  # and leaves it again
    expect(widget_list(alices)).to_have_text("alice", timeout=TIMEOUT_MS)
    expect(widget_list(bobs)).to_have_text("bob", timeout=TIMEOUT_MS)
    expect(alices.locator(".whos-online-label")).to_have_text("Here now:")
    assert_not_reloaded(alices)


def is_renewal(request: PlaywrightRequest) -> bool:
    """The live widget fetching its page again for fresh tokens: a background request."""
    return (
        request.url.endswith("/topics/1/")
        and request.headers.get("x-requested-with") == "XMLHttpRequest"
    )


def test_a_room_s_page_renews_its_token_before_it_runs_out(site, open_page, settings, alice, bob):
    """The widget fetches its page again in the background shortly before the token runs out,
    takes its fresh URLs and goes on, with no refusal on the way; the reader stays in the room.
    The page's timers and the site's clock are moved by the test."""
    configure(settings, REFRESH_INTERVAL=1, JSON_MAX_AGE=0, ROOM_TOKEN_MAX_AGE=60)
    alices = open_page()
    alices.clock.install()
    alices.goto(f"{site}/login/alice/")
    alices.goto(f"{site}/topics/1/")
    expect(widget_list(alices)).to_have_text("alice")
    widget = alices.locator(".whos-online")
    first_url = widget.get_attribute("data-whos-online-live")
    # 60 s less a quarter (44 when the page was rendered across the turn of a second)
    assert widget.get_attribute("data-whos-online-renew") in {"44", "45"}

    real_time = time.time
    offset = [46.0]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "time", lambda: real_time() + offset[0])
        with alices.expect_response(lambda response: "/online/widgets/" in response.url):
            alices.clock.run_for(47_000)  # one refresh, before the deadline as the page saw it
        with alices.expect_request(is_renewal):
            alices.clock.run_for(2_000)  # the next one, past it, renews first
        offset[0] = 100.0  # the first token has run out; the renewed one has not
        whos_online.record_user(bob, room="topic:1")
        alices.clock.run_for(2_000)
        expect(widget).to_have_attribute("data-users", "2")
    assert widget.get_attribute("data-whos-online-live") != first_url
    assert whos_online.online_counts(room="topic:1").users == 2  # the renewal moved nobody


def test_a_room_s_page_whose_token_is_refused_renews_it(site, open_page, settings, alice, bob):
    """A token refused before its time (a tab hidden for long, whose timers slept; a login in
    another tab): the widget fetches its page again for fresh tokens, and goes on."""
    configure(settings, REFRESH_INTERVAL=1, JSON_MAX_AGE=0, ROOM_TOKEN_MAX_AGE=60)
    open_page.allow("status of 403")  # the browser logs the refusal
    alices = open_page()
    alices.goto(f"{site}/login/alice/")
    alices.goto(f"{site}/topics/1/")
    expect(widget_list(alices)).to_have_text("alice")
    mark_page(alices)
    widget = alices.locator(".whos-online")
    first_url = widget.get_attribute("data-whos-online-live")

    real_time = time.time
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "time", lambda: real_time() + 120)  # the token has run out
        with alices.expect_request(is_renewal):
            whos_online.record_user(bob, room="topic:1")
        expect(widget).to_have_attribute("data-users", "2", timeout=TIMEOUT_MS)
    assert widget.get_attribute("data-whos-online-live") != first_url
    assert whos_online.online_counts(room="topic:1").users == 2
    assert_not_reloaded(alices)


class Words:
    """What the presence view was told, as the site's live server heard it: the rooms of each
    "still here" and of each leave (a leaving beacon outlives its page, and the browser does
    not report it as a request of the page)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.stays: list[str] = []
        self.leaves: list[str] = []
        stay_in, leave_room = rooms.stay_in, visits.leave_room

        def stay(request: HttpRequest, room: str) -> None:
            self.stays.append(room)
            stay_in(request, room)

        def leave(request: HttpRequest, config: Config, room: str) -> bool:
            self.leaves.append(room)
            return leave_room(request, config, room)

        monkeypatch.setattr(rooms, "stay_in", stay)
        monkeypatch.setattr(visits, "leave_room", leave)


class Sent:
    """The requests a page sent, by what they are to whos_online."""

    def __init__(self, page: Page) -> None:
        self.requests: list[PlaywrightRequest] = []
        page.on("request", self._sent)

    def _sent(self, request: PlaywrightRequest) -> None:
        self.requests.append(request)

    def to(self, path: str, *, method: str = "GET") -> int:
        return sum(
            1
            for request in self.requests
            if urlsplit(request.url).path == path and request.method == method
        )

    def renewals(self, path: str) -> int:
        return sum(
            1
            for request in self.requests
            if urlsplit(request.url).path == path and is_background(request)
        )


def is_background(request: PlaywrightRequest) -> bool:
    return request.headers.get("x-requested-with") == "XMLHttpRequest"


THREE = "/three/1/"


def three_widgets(page: Page) -> tuple[Locator, Locator, Locator]:
    """The room's widget, the site's and the one that shows both, on the page at THREE."""
    return (
        page.locator("#room .whos-online"),
        page.locator("#site .whos-online"),
        page.locator("#both .whos-online"),
    )


def test_a_page_with_three_widgets_is_one_live_client(
    site, open_page, settings, *, monkeypatch, alice, bob
):
    """A room's widget, the site's and one with both, on one page: the script is loaded once,
    each interval's refresh is ONE request that updates all three, and the room is told once
    that its reader is still here, and once that they left. The page's timers are moved by the
    test (an interval of 20 s, the shortest of the page's; the site's widget asks for 60 s)."""
    configure(
        settings, REFRESH_INTERVAL=20, THROTTLE=30, JSON_MAX_AGE=0, SHOW_NAMES_TO="authenticated"
    )
    words = Words(monkeypatch)
    page = open_page()
    page.clock.install()
    page.goto(f"{site}/login/alice/")
    sent = Sent(page)
    page.goto(f"{site}{THREE}")
    room, site_only, both = three_widgets(page)
    expect(room.locator(".whos-online-list")).to_have_text("alice")
    expect(both.locator(".whos-online-site .whos-online-list")).to_have_text("alice")
    mark_page(page)
    # One per tag, as they are rendered (each with the check that says when it did not load).
    assert page.locator("script[data-whos-online-script]").count() == 3
    assert sent.to("/static/whos_online/live.js") == 1

    whos_online.record_user(bob, room="topic:1")
    with page.expect_response(lambda response: "/online/widgets/" in response.url):
        page.clock.run_for(20_000)
    # Every widget, from that one answer.
    for widget in (room, site_only, both, both.locator(".whos-online-site")):
        expect(widget).to_have_attribute("data-users", "2")
    expect(room.locator(".whos-online-list")).to_have_text("bob and alice")
    expect(both.locator(".whos-online-site .whos-online-list")).to_have_text("bob and alice")
    for guests in range(1, 5):  # four more intervals: 100 s in all
        whos_online.record_guest(f"198.51.100.{guests}")
        page.clock.run_for(20_000)
        expect(site_only).to_have_attribute("data-guests", str(guests))
        expect(both.locator(".whos-online-site")).to_have_attribute("data-guests", str(guests))
    expect(both).to_have_attribute("data-guests", "0")  # the room's part: nobody new

    assert sent.to("/online/widgets/") == 5
    assert sent.to("/online/widget/") == 0
    eventually(lambda: words.stays == ["topic:1"] * 3)  # at 31, 62 and 93 s
    assert sent.to("/online/presence/", method="POST") == 3
    assert sent.renewals(THREE) == 0
    assert_not_reloaded(page)

    page.goto(f"{site}/plain/")  # in no room: the page view alone would take alice out
    eventually(lambda: words.leaves == ["topic:1"])
    assert words.stays == ["topic:1"] * 3
    assert sent.to("/static/whos_online/live.js") == 1


def test_a_page_whose_tokens_are_refused_renews_them_once_for_all_its_widgets(
    site, open_page, settings, alice, bob
):
    """Both room widgets of the page are refused at once (the tokens ran out while the tab's
    timers slept): one background fetch of the page renews both, and the one refresh that
    follows serves the three widgets again."""
    configure(settings, REFRESH_INTERVAL=1, JSON_MAX_AGE=0, ROOM_TOKEN_MAX_AGE=60)
    open_page.allow("status of 403")  # the browser logs the refused presence word, if any
    page = open_page()
    page.goto(f"{site}/login/alice/")
    sent = Sent(page)
    page.goto(f"{site}{THREE}")
    room, site_only, both = three_widgets(page)
    expect(room).to_have_attribute("data-users", "1")
    first_urls = [room.get_attribute("data-whos-online-live")]

    real_time = time.time
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(time, "time", lambda: real_time() + 120)  # the tokens have run out
        with page.expect_request(is_background):
            whos_online.record_user(bob, room="topic:1")
        for widget in (room, site_only, both):
            expect(widget).to_have_attribute("data-users", "2")
    assert room.get_attribute("data-whos-online-live") not in first_urls
    assert sent.renewals(THREE) == 1
    assert sent.to("/online/widget/") == 0


@pytest.fixture
def forum(site, settings) -> str:
    """The test site with a forum whose topics are rooms by ``ROOMS`` (an app's undecorated
    view), each page marking its topic read in the background once loaded."""
    configure(settings, ROOMS={"forum-topic": "topic:{pk}"})
    return str(site)


def marked_read(page: Page) -> None:
    """Wait for the page's own background request to have been answered."""
    expect(page.locator("body")).to_have_attribute("data-marked-read", "")


def test_a_topic_s_own_background_request_leaves_its_readers_in_its_room(
    forum, open_page, alice, bob
):
    alices = open_page()
    alices.goto(f"{forum}/login/alice/")
    alices.goto(f"{forum}/forum-topics/1/")
    # The page counts its reader in from the first render on: no refresh needed.
    expect(widget_list(alices)).to_have_text("alice")
    marked_read(alices)

    bobs = open_page()
    bobs.goto(f"{forum}/login/bob/")
    bobs.goto(f"{forum}/forum-topics/1/")
    expect(widget_list(bobs)).to_have_text("bob and alice")
    marked_read(bobs)

    # Both pages' scripts have posted: neither reader left the room.
    expect(widget_list(alices)).to_have_text("bob and alice", timeout=TIMEOUT_MS)
    assert whos_online.online_counts(room="topic:1").users == 2
    bobs.goto(f"{forum}/forum-topics/2/")
    marked_read(bobs)
    expect(widget_list(alices)).to_have_text("alice", timeout=TIMEOUT_MS)
    expect(widget_list(bobs)).to_have_text("bob")


def test_a_reader_stays_in_the_room_while_the_page_is_open_and_leaves_with_it(
    forum, open_page, settings, alice, monkeypatch
):
    """Past WINDOW without a click, the page's word keeps its reader in the room; leaving the
    page takes them out within seconds. The page's timers and the site's clock are moved by the
    test: nothing waits for real minutes."""
    configure(settings, ROOMS={"forum-topic": "topic:{pk}"}, WINDOW=60, THROTTLE=10)
    window = 60
    page = open_page()
    page.clock.install()
    page.goto(f"{forum}/login/alice/")
    start = time.time()
    page.goto(f"{forum}/forum-topics/1/")
    marked_read(page)
    assert whos_online.online_counts(room="topic:1").users == 1

    real_time = time.time
    offset = [0.0]
    monkeypatch.setattr(time, "time", lambda: real_time() + offset[0])
    for step in (1, 2, 3):  # three "still here" words, each after the throttle ran out
        offset[0] = 40.0 * step
        with page.expect_response(lambda response: "/online/presence/" in response.url):
            page.clock.run_for(12_000)
    assert counts_in("topic:1", at=start + 3 * 40 + window - 1).users == 1  # past WINDOW
    assert start + window < start + 3 * 40

    page.goto(f"{forum}/plain/")  # the reader leaves the topic for a page in no room
    moment = start + offset[0]
    eventually(lambda: counts_in("topic:1", at=moment + 6).users == 0)


def counts_in(room: str, *, at: float) -> whos_online.OnlineCounts:
    from whos_online.backend.clients import admin_client
    from whos_online.config.settings import get_config
    from whos_online.store import snapshot

    return snapshot.snapshot(admin_client(), get_config(), limit=0, now=at, room=room).counts


def eventually(condition: Callable[[], bool]) -> None:
    """Wait for ``condition``, which depends on a request the browser sends on its own."""
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while not condition():
        assert time.monotonic() < deadline, "the condition never came true"
        time.sleep(0.05)


def test_a_guest_sees_the_count_change_without_reloading(site, open_page):
    guest = open_page()
    guest.goto(f"{site}/live/")
    widget = guest.locator(".whos-online")
    # The page counts its own viewer in, and its refreshes go on showing them.
    expect(widget_list(guest)).to_have_text("1 guest", timeout=TIMEOUT_MS)
    mark_page(guest)

    whos_online.record_guest("198.51.100.7")
    whos_online.record_guest("198.51.100.8", bot=True)

    expect(widget_list(guest)).to_have_text("2 guests and 1 bot", timeout=TIMEOUT_MS)
    expect(widget).to_have_attribute("data-total", "2")
    expect(widget.locator(".whos-online-visitors")).to_have_text("2 unique visitors today")
    expect(widget.locator(".whos-online-peak")).to_contain_text("Most people ever online was 2")
    assert_not_reloaded(guest)
    # The script writes what the server writes: a fresh render of the same state (the guest's
    # second visit changes nothing) reads the same, peak date included.
    fresh = guest.context.new_page()
    fresh.goto(f"{site}/live/")
    written = guest.locator(".whos-online").inner_text()
    assert fresh.locator(".whos-online").inner_text() == written


#: A site's own whos_online/online.html: other markup, other words, no class of the default one.
OVERRIDE = (
    "{% load i18n static %}"
    '<aside id="crowd" data-whos-online-live="{{ live.url }}" '
    'data-whos-online-refresh="{{ live.refresh }}">'
    "{% blocktranslate count people=counts.total %}{{ people }} soul aboard{% plural %}"
    "{{ people }} souls aboard{% endblocktranslate %}</aside>"
    "{% if live %}<script src=\"{% static 'whos_online/live.js' %}\" defer></script>{% endif %}"
)


def test_a_sites_own_template_survives_the_refreshes(site, open_page, settings, tmp_path):
    override = tmp_path / "whos_online" / "online.html"
    override.parent.mkdir()
    override.write_text(OVERRIDE)
    settings.TEMPLATES = [{**settings.TEMPLATES[0], "DIRS": [str(tmp_path)]}]
    guest = open_page()
    guest.goto(f"{site}/live/")
    crowd = guest.locator("#crowd")
    # The page counts its own viewer in, and its refreshes go on counting them.
    expect(crowd).to_have_text("1 soul aboard", timeout=TIMEOUT_MS)
    mark_page(guest)

    whos_online.record_guest("198.51.100.7")
    whos_online.record_guest("198.51.100.8")

    expect(crowd).to_have_text("3 souls aboard", timeout=TIMEOUT_MS)
    assert guest.locator(".whos-online").count() == 0
    assert guest.locator("script").count() == 1  # the refreshes brought no script in
    assert_not_reloaded(guest)


def seed_history(users: list[AbstractUser]) -> None:
    """Two hours of visits, minute by minute, as the site would have recorded them."""
    now = time.time()
    rng = random.Random(7)
    for minute in range(119, -1, -1):
        moment = now - 60 * minute
        crowd = 6 + round(5 * (1 + math.sin(minute / 17)))
        for index in range(crowd + rng.randrange(4)):
            whos_online.record_guest(f"10.1.{minute % 5}.{index}", now=moment - rng.random() * 50)
        # A crawler that comes back every other minute, from a new address each half hour.
        if minute % 2 == 0:
            whos_online.record_guest(f"10.2.0.{minute // 30}", bot=True, now=moment)
        for index, user in enumerate(users):
            if (minute + 11 * index) % 37 < 24 - 3 * index:
                whos_online.record_user(user, now=moment - index)
        whos_online.update_counter("hits", 3 * crowd + rng.randrange(15), now=moment)
        if rng.random() < 0.3:
            whos_online.update_counter("signups", rng.randint(1, 3), now=moment)


def test_the_dashboard_draws_charts_and_refreshes_itself(site, open_page, staff, alice, bob):
    others = [get_user_model().objects.create_user(name) for name in ("carol", "dmitri", "eve")]
    seed_history([alice, bob, *others])
    page = open_page()
    page.goto(f"{site}/login/{staff.get_username()}/")

    page.goto(f"{site}/online/")

    guests_chart = page.locator('figure[data-counter="online:guests"] svg')
    expect(guests_chart).to_be_visible()
    assert guests_chart.locator("circle.point").count() > 100
    assert guests_chart.locator("polyline.line").count() >= 1
    expect(page.locator('figure[data-counter="signups"] circle.point')).to_have_count(120)
    expect(page.locator(".wo-names li")).to_have_count(len(whos_online.online_users()))
    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=SCREENSHOT, full_page=True)
    assert SCREENSHOT.stat().st_size > 10_000

    mark_page(page)
    guests = int(page.locator('[data-count="guests"]').inner_text())
    whos_online.record_guest("198.51.100.99")
    expect(page.locator('[data-count="guests"]')).to_have_text(str(guests + 1))
    assert_not_reloaded(page)


def test_the_dashboard_fits_a_phone(site, open_page, staff, alice, bob):
    seed_history([alice, bob])
    page = open_page(390, 844)
    page.goto(f"{site}/login/{staff.get_username()}/")

    page.goto(f"{site}/online/")

    expect(page.locator('figure[data-counter="online:guests"] svg')).to_be_visible()
    page.screenshot(path=SCREENSHOT.with_name("dashboard-phone.png"), full_page=True)
    assert page.evaluate("document.scrollingElement.scrollWidth") <= 390
    chart = page.locator('figure[data-counter="online:guests"]').bounding_box()
    assert chart is not None
    assert chart["x"] >= 0
    assert chart["x"] + chart["width"] <= 390
    page.get_by_role("link", name="Back to the site").click()
    expect(page.locator("main")).to_have_text("page")


def test_the_dashboards_axis_labels_are_readable_on_a_phone(site, open_page, staff, alice):
    """The charts scale down to the screen's width, their labels with them: a phone must still
    show them at a size one can read."""
    seed_history([alice])
    page = open_page(390, 844)
    page.goto(f"{site}/login/{staff.get_username()}/")

    page.goto(f"{site}/online/")

    expect(page.locator('figure[data-counter="online:guests"] svg')).to_be_visible()
    sizes = page.evaluate(
        """() => [...document.querySelectorAll('.whos-online-chart text')].map(
            (text) => parseFloat(getComputedStyle(text).fontSize) * text.getScreenCTM().a)"""
    )
    assert len(sizes) > 10
    assert min(sizes) >= 10.5, sizes


# The example project, as a newcomer opens it: served by runserver in a process of its own, with
# its own settings and a database of its own, on the session's real Redis.

Scheme = Literal["light", "dark"]
#: WCAG 2 AA: the contrast ratio of normal text with its background.
AA = 4.5
#: The text elements of a page whose colour is less than AA on what is behind them, as
#: [element, text, ratio]. The background is the first opaque one up the tree (or the canvas,
#: the browser's own in the page's colour scheme), with the translucent ones in between laid
#: over it; an SVG text's colour is its fill.
LOW_CONTRAST = """(minimum) => {
  const rgba = (value) => {
    const found = value.match(/rgba?\\(([^)]*)\\)/);
    if (!found) return null;
    const [r, g, b, a = 1] = found[1].split(/[\\s,\\/]+/).filter(Boolean).map(Number);
    return [r, g, b, a];
  };
  const over = (top, below) => top.slice(0, 3).map((v, i) => v * top[3] + below[i] * (1 - top[3]));
  const luminance = (colour) => {
    const [r, g, b] = colour.map((v) => {
      const c = v / 255;
      return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const probe = document.createElement("div");
  probe.style.backgroundColor = "Canvas";
  document.documentElement.append(probe);
  const canvas = rgba(getComputedStyle(probe).backgroundColor);
  probe.remove();
  const behind = (element) => {
    const layers = [];
    for (let node = element; node; node = node.parentElement) {
      const colour = rgba(getComputedStyle(node).backgroundColor);
      if (colour && colour[3] > 0) {
        layers.push(colour);
        if (colour[3] === 1) break;
      }
    }
    let base = canvas;
    for (const layer of layers.reverse()) base = over(layer, base);
    return base;
  };
  const low = [];
  for (const element of document.querySelectorAll("body *")) {
    const text = [...element.childNodes]
      .filter((node) => node.nodeType === Node.TEXT_NODE)
      .map((node) => node.textContent).join("").trim();
    if (!text || !element.getClientRects().length) continue;
    const style = getComputedStyle(element);
    if (style.visibility === "hidden" || ["SCRIPT", "STYLE", "TITLE"].includes(element.tagName)) {
      continue;
    }
    const background = behind(element);
    const colour = rgba(element instanceof SVGElement ? style.fill : style.color);
    const [light, dark] = [luminance(over(colour, background)), luminance(background)].sort(
      (x, y) => y - x);
    const ratio = (light + 0.05) / (dark + 0.05);
    if (ratio < minimum) low.push([element.tagName + "." + element.className, text, ratio]);
  }
  return low;
}"""

#: The example's settings as they are, but for a database of its own.
EXAMPLE_SETTINGS = """from example_project.settings import *

DATABASES = {{"default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": {database!r}}}}}
# A read that outlasts the request timeout on a loaded machine is tried again a second later,
# not ten: a page read meanwhile shows nobody, as it should while Redis does not answer.
WHOS_ONLINE = {{**WHOS_ONLINE, "FAILURE_BACKOFF": 1}}
"""


@pytest.fixture(scope="module")
def example(real_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The example site's URL, with its demo users and forum."""
    directory = tmp_path_factory.mktemp("example")
    database = str(directory / "example.sqlite3")
    (directory / "example_settings.py").write_text(EXAMPLE_SETTINGS.format(database=database))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(directory), str(ROOT)]),
        "DJANGO_SETTINGS_MODULE": "example_settings",
        "REDIS_URL": real_redis_url,
    }
    for step in (["migrate", "--noinput"], ["whos_online_demo"]):
        subprocess.run(
            [sys.executable, "manage.py", *step], cwd=ROOT, env=env, check=True, capture_output=True
        )
    log = directory / "runserver.log"
    with wsgi_server.runserver(env, log, ready_path="/accounts/login/") as (port, _process):
        yield f"http://127.0.0.1:{port}"


def example_page(browser: Browser, width: int, scheme: Scheme = "light") -> Page:
    context = browser.new_context(
        viewport={"width": width, "height": 800}, color_scheme=scheme, user_agent=USER_AGENT
    )
    context.set_default_timeout(TIMEOUT_MS)
    return context.new_page()


def log_in(page: Page, example: str, username: str, password: str = "demo-password-123") -> None:
    page.goto(f"{example}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", password)
    page.click("input[type=submit]")


@pytest.mark.slow
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_text_of_the_example_is_readable_in_light_and_dark(backend, browser, example, scheme):
    guest = example_page(browser, 1366, scheme)
    log_in(guest, example, "admin", "not-the-password")
    expect(guest.locator(".errorlist")).to_be_visible()
    assert guest.evaluate(LOW_CONTRAST, AA) == []

    page = example_page(browser, 1366, scheme)
    log_in(page, example, "admin")
    for path in ("/", "/forum/", "/forum/topics/1/", "/chat/", "/online/"):
        page.goto(f"{example}{path}")
        assert page.evaluate(LOW_CONTRAST, AA) == [], path
    page.goto(f"{example}/")
    SCREENSHOT.parent.mkdir(exist_ok=True)
    page.screenshot(path=SCREENSHOT.with_name(f"example-{scheme}.png"), full_page=True)


@pytest.mark.slow
def test_the_example_header_keeps_to_one_line_on_a_desktop_and_to_the_screen_on_a_phone(
    backend, browser, example
):
    for width in (1366, 390):
        page = example_page(browser, width)
        log_in(page, example, "admin")  # the longest header: a name, the staff links
        page.goto(f"{example}/")
        assert page.evaluate("document.scrollingElement.scrollWidth") <= width
        middles = page.evaluate(
            """() => [...document.querySelectorAll('header > *')].map((element) => {
                const box = element.getBoundingClientRect();
                return box.top + box.height / 2;
            })"""
        )
        if width == 1366:  # a second line would be a line's height lower
            assert max(middles) - min(middles) < 5, middles


@pytest.mark.slow
def test_the_user_admins_columns_fit_a_laptop_screen(backend, browser, example):
    page = example_page(browser, 1366)
    log_in(page, example, "admin")

    page.goto(f"{example}/admin/auth/user/")
    last_seen = page.locator("td.field-last_seen").first
    # The admin's own row shows when they were last seen, once its read has answered: on a
    # loaded machine one can outlast the request timeout, and the page then shows "-" (it fails
    # open) until the breaker lets the next read through; the column is measured filled.
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while (last_seen.text_content() or "").strip() == "-" and time.monotonic() < deadline:
        page.wait_for_timeout(500)
        page.reload()

    expect(last_seen).not_to_have_text("-")
    overflow = page.evaluate(
        """() => {
            const results = document.querySelector('#changelist .results');
            return results.scrollWidth - results.clientWidth;
        }"""
    )
    assert overflow <= 0
