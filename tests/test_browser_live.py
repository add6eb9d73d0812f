"""The live widget on the stream (uvicorn, ASGI) and without it (WSGI), in Chromium.

Under uvicorn the site (tests/load_settings.py, on the real redis-server) refreshes its widgets
every 600 s: only the stream can bring a change in time. Under the WSGI live server the stream
answers 204, and the widget polls as before. The browser and the pages are tests/test_browser.py's
(Chromium from Debian, a strict CSP, any script error fails the test).

The test under uvicorn measures, over ``WHOS_ONLINE_LIVE_ROUNDS`` rounds (3 unless set), how long
an arrival and a leave took to show on the other reader's page, and prints the median and the
95th percentile (``-s`` shows them): figures to report, not to assert, on a shared machine.
"""

from __future__ import annotations

import math
import os
import statistics
import subprocess
import sys
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import expect

import whos_online
from tests import test_browser
from tests.support import wsgi_server
from tests.support.helpers import configure
from tests.test_browser import (
    ROOT,
    STREAM,
    TIMEOUT_MS,
    Sent,
    is_renewal,
    is_routed,
    widget_list,
    with_csp,
)
from whos_online.config.settings import DEFAULTS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from playwright.sync_api import Page, Route
    from playwright.sync_api import Response as PlaywrightResponse

    from tests.test_browser import Pages

pytestmark = [
    pytest.mark.browser,
    pytest.mark.parametrize("backend", ["real"], indirect=True),
    pytest.mark.skipif(sys.platform == "win32", reason="uvicorn's workers run on Unix here"),
]

#: tests/test_browser.py's fixtures: its Chromium, its pages, its site on the live server.
browser, open_page, site = test_browser.browser, test_browser.open_page, test_browser.site
TOPIC = "/topics/1/"
#: The site of tests/test_browser.py as a deployment runs it: the load test's settings (a real
#: Redis, a shared database file, flushes every tenth of a second, LIVE_UPDATES on), with
#: refreshes so rare that a test sees a change only if the stream brought it.
SETTINGS = """from tests.load_settings import *

WHOS_ONLINE = {
    **WHOS_ONLINE,
    "TRUSTED_PROXY_COUNT": 0,
    "REFRESH_INTERVAL": 600,
    "SHOW_NAMES_TO": "authenticated",
}
"""
#: Django's ASGI application with the static files (live.js) served beside it, as runserver does.
APPLICATION = """from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application


def application():
    return ASGIStaticFilesHandler(get_asgi_application())
"""
#: The same in ``whos_online.asgi.LiveStreams`` (tests/test_browser_hops.py serves it).
LIVE_STREAMS_APPLICATION = """from django.contrib.staticfiles.handlers import ASGIStaticFilesHandler
from django.core.asgi import get_asgi_application

from whos_online.asgi import LiveStreams


def application():
    return LiveStreams(ASGIStaticFilesHandler(get_asgi_application()))
"""
PREPARE = """
import django
django.setup()
from django.core.management import call_command
from django.contrib.auth.models import User
call_command("migrate", verbosity=0)
User.objects.bulk_create([User(username="alice"), User(username="bob")])
"""
ROUNDS = int(os.environ.get("WHOS_ONLINE_LIVE_ROUNDS", "3"))
#: Records, on the page, each stream its script opens and the events of its streams other than
#: states (``stale``, ``end``, ``error``), before its script opens any.
STREAM_EVENTS = """(() => {
  const Original = window.EventSource;
  window.whosOnlineStreamEvents = [];
  window.whosOnlineStreams = [];
  window.EventSource = function (url, options) {
    const source = new Original(url, options);
    window.whosOnlineStreams.push(source);
    for (const name of ["stale", "end", "error"]) {
      source.addEventListener(name, () => window.whosOnlineStreamEvents.push(name));
    }
    return source;
  };
  window.EventSource.prototype = Original.prototype;
  Object.assign(window.EventSource, { CONNECTING: 0, OPEN: 1, CLOSED: 2 });
})();"""
#: Whether every stream the page opened is closed (``EventSource.CLOSED``).
STREAMS_CLOSED = "window.whosOnlineStreams.every((source) => source.readyState === 2)"
#: The path of the presence view, which a room's page tells that its reader stays or leaves.
PRESENCE = "/online/presence/"
#: Records, on the page, each text the widget's list shows and when (the page's clock, which is
#: this machine's: ``Date.now()`` and ``time.time()`` agree).
WATCH = """() => {
  const widget = document.querySelector(".whos-online");
  window.whosOnlineTexts = [];
  const note = () => {
    const text = widget.querySelector(".whos-online-list").textContent;
    const texts = window.whosOnlineTexts;
    if (!texts.length || texts[texts.length - 1].text !== text) {
      texts.push({ at: Date.now() / 1000, text: text });
    }
  };
  note();
  new MutationObserver(note).observe(widget, {
    subtree: true, childList: true, characterData: true, attributes: true,
  });
}"""


@pytest.fixture(scope="module", params=["django", "live_streams"])
def asgi_site(
    request: pytest.FixtureRequest, real_redis_url: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """The test site under uvicorn, with users alice and bob in its own database; Django's
    application as it is, then the same in ``LiveStreams``."""
    directory = tmp_path_factory.mktemp("live")
    (directory / "live_settings.py").write_text(SETTINGS)
    (directory / "live_asgi.py").write_text(
        APPLICATION if request.param == "django" else LIVE_STREAMS_APPLICATION
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(directory), str(ROOT)]),
        "DJANGO_SETTINGS_MODULE": "live_settings",
        "WHOS_ONLINE_LOAD_DB": str(directory / "live.sqlite3"),
        "REDIS_URL": real_redis_url,
    }
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    subprocess.run([sys.executable, "-c", PREPARE], cwd=ROOT, env=env, check=True)
    with wsgi_server.uvicorn(
        env, directory / "uvicorn.log", ready_path="/plain/", factory="live_asgi:application"
    ) as (port, _process):
        yield f"http://127.0.0.1:{port}"


def texts_since(page: Page, moment: float) -> list[tuple[float, str]]:
    found = page.evaluate("window.whosOnlineTexts")
    return [(entry["at"], entry["text"]) for entry in found if entry["at"] >= moment]


def first_time(page: Page, moment: float, *, shows_alice: bool) -> float:
    """How long after ``moment`` the widget first showed (or stopped showing) alice."""
    for at, text in texts_since(page, moment):
        if ("alice" in text) == shows_alice:
            return at - moment
    raise AssertionError(texts_since(page, moment))


def until(page: Page, condition: Callable[[], bool]) -> None:
    """Wait for ``condition`` on what ``page`` sent, letting Playwright take in its events
    meanwhile (a plain sleep would hold them back)."""
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while not condition():
        assert time.monotonic() < deadline, "the condition never came true"
        page.wait_for_timeout(50)


def failures_taken_in(page: Page) -> None:
    """Wait until every stream the page opened is closed (failed, or closed by the page), so
    that its next try is timed from the page's clock as it stands. The browser answers a stream
    in real time while the test moves the page's clock: a failure taken in late would start its
    back-off from a later moment (on a busy machine, seconds of the page's clock later). A
    stream's failure closes it and runs the page's handler in one task, before this looks."""
    until(page, lambda: page.evaluate(STREAMS_CLOSED) is True)


def nearest_rank(values: list[float], percent: float) -> float:
    ordered = sorted(values)
    return ordered[max(math.ceil(percent / 100 * len(ordered)) - 1, 0)]


def report(name: str, delays: list[float]) -> None:
    print(
        f"\n{name} over {len(delays)} rounds: median {statistics.median(delays):.2f} s, "
        f"p95 {nearest_rank(delays, 95):.2f} s, max {max(delays):.2f} s "
        f"({', '.join(f'{delay:.2f}' for delay in delays)})"
    )


def is_stream(response: PlaywrightResponse) -> bool:
    return urlsplit(response.url).path == STREAM


def test_under_asgi_the_stream_shows_who_comes_and_goes(backend, asgi_site, open_page):
    """bob's page never polls (600 s): alice coming to the topic, and leaving the site (her
    page's leaving beacon, the only word of it the site gets), reach it on the stream, round
    after round, without a reload.

    She leaves for about:blank rather than by closing the tab, for a reason of the test's own:
    its pages route every request through Playwright (for the CSP, see tests/test_browser.py),
    so Chromium holds each one, the leaving beacon too, for Playwright to answer, and closing the
    page ends that hold. With ``page.close(run_before_unload=True)`` the beacon then sometimes
    never went out (one round in 15, in each of two runs, and 7 of 10 when her context was
    closed: no POST to the presence view reached the server; her throttle cookie was unspent);
    without the route the same closes always took her out (25 of 25, and 10 of 10), as did the
    page closing itself with ``window.close()`` (8 of 8, routed or not). A page that navigates
    away stays open, and the beacon it holds is answered."""
    bobs: Page = open_page()
    bobs.add_init_script(STREAM_EVENTS)
    bobs.goto(f"{asgi_site}/login/bob/")
    sent = Sent(bobs)
    with bobs.expect_response(is_stream) as opened:
        bobs.goto(f"{asgi_site}{TOPIC}")
    assert opened.value.status == 200
    assert opened.value.headers["content-type"].startswith("text/event-stream")
    expect(widget_list(bobs)).to_have_text("bob")
    bobs.evaluate(WATCH)
    bobs.evaluate("window.whosOnlineTestMark = true")

    arrivals: list[float] = []
    leaves: list[float] = []
    for _ in range(ROUNDS):
        alices: Page = open_page()
        alices.goto(f"{asgi_site}/login/alice/")
        moment = time.time()
        alices.goto(f"{asgi_site}{TOPIC}")
        expect(widget_list(bobs)).to_have_text("alice and bob", timeout=TIMEOUT_MS)
        arrivals.append(first_time(bobs, moment, shows_alice=True))
        expect(widget_list(alices)).to_contain_text("alice")

        moment = time.time()
        # alice leaves the site: only her page's leaving beacon can say so.
        alices.goto("about:blank")
        try:
            expect(widget_list(bobs)).to_have_text("bob", timeout=TIMEOUT_MS)
        except AssertionError as error:
            # Whether the leave was written, or written and not pushed.
            in_room = [user.name for user in whos_online.online_users(room="topic:1")]
            shown = texts_since(bobs, 0)
            msg = f"round {len(leaves)}: the room holds {in_room}; the page showed {shown}"
            raise AssertionError(msg) from error
        leaves.append(first_time(bobs, moment, shows_alice=False))

    # Every change came on the one stream the page opened: no second stream, and no refresh
    # but while the stream said Redis could not be read (``stale``: a read that timed out on a
    # busy machine), when the page polls by design.
    assert sent.to(STREAM) == 1
    stales = bobs.evaluate("window.whosOnlineStreamEvents").count("stale")
    assert sent.to("/online/widgets/") <= stales, bobs.evaluate("window.whosOnlineStreamEvents")
    assert bobs.evaluate("window.whosOnlineTestMark") is True
    report("arrival", arrivals)
    report("leave", leaves)


def test_joins_moves_reloads_and_leaves_as_another_open_page_sees_them(
    backend, asgi_site, open_page
):
    """What bob's open page of the topic shows as alice, round after round, comes to it (a
    join), reloads her page (she never leaves his list: no blink), goes to another topic (a
    move: she leaves his at once), comes back, and leaves the site (she leaves his list after
    ``LEAVE_GRACE``, 5 s). The times are printed (``-s``), to report: a shared machine's.

    She leaves for about:blank rather than by closing her tab, as in the test above: her page's
    requests but its presence words are routed through Playwright (for the CSP), and from
    Playwright 1.62 on, a closed page's leaving beacon went out late or not at all in about half
    the runs (on 1.62, 1.63, 1.64.1 and 1.65.2; never on 1.56 or 1.61), where a page that
    navigates away stays open until its beacon is answered."""
    bobs: Page = open_page()
    bobs.goto(f"{asgi_site}/login/bob/")
    bobs.goto(f"{asgi_site}{TOPIC}")
    expect(widget_list(bobs)).to_have_text("bob")
    bobs.evaluate(WATCH)
    seen: dict[str, list[float]] = {"join": [], "move": [], "leave": []}
    blinks = 0

    def shown(moment: float, *, alice: bool) -> float:
        expect(widget_list(bobs)).to_have_text(
            "alice and bob" if alice else "bob", timeout=TIMEOUT_MS
        )
        return first_time(bobs, moment, shows_alice=alice)

    alices: Page = open_page()
    alices.goto(f"{asgi_site}/login/alice/")
    # Her context does not hold her leaving words for its route (see the test above): a page
    # that held one would answer it only as it went on to the next.
    context = alices.context
    context.unroute_all(behavior="wait")
    context.route(lambda url: is_routed(url) and PRESENCE not in url, with_csp)
    for _ in range(ROUNDS):
        moment = time.time()
        alices.goto(f"{asgi_site}{TOPIC}")
        seen["join"].append(shown(moment, alice=True))

        moment = time.time()
        alices.reload()
        expect(widget_list(alices)).to_contain_text("alice")
        bobs.wait_for_timeout(3_000)  # past the leaving word's answer and the next state
        blinks += sum(1 for _at, text in texts_since(bobs, moment) if "alice" not in text)

        moment = time.time()
        alices.goto(f"{asgi_site}/topics/2/")
        seen["move"].append(shown(moment, alice=False))

        # She leaves the site: only her page's leaving word tells.
        alices.goto(f"{asgi_site}{TOPIC}")
        shown(time.time(), alice=True)
        moment = time.time()
        alices.goto("about:blank")
        seen["leave"].append(shown(moment, alice=False))
        alices.close()
        alices = context.new_page()

    for name, delays in seen.items():
        report(name, delays)
    print(f"reload over {ROUNDS} rounds: {blinks} blinks")
    assert blinks == 0
    assert statistics.median(seen["move"]) < DEFAULTS["LEAVE_GRACE"]
    assert statistics.median(seen["leave"]) >= DEFAULTS["LEAVE_GRACE"]


def opened_streams(sent: Sent) -> int:
    """The streams the page tried to open (not its one request asking why one failed)."""
    return sum(
        1
        for request in sent.requests
        if urlsplit(request.url).path == STREAM and request.resource_type == "eventsource"
    )


def test_under_wsgi_the_widget_polls_and_tries_the_stream_again_rarely(
    site, open_page: Pages, settings, alice, bob
):
    """The live server is WSGI: the stream answers 204, and the widget polls every second as
    before; it tries the stream again after 5 s, then after longer and longer waits, never in
    a loop. The page's timers are moved by the test, from the moment the first try failed."""
    configure(settings, LIVE_UPDATES=True)
    bobs = open_page()
    bobs.add_init_script(STREAM_EVENTS)
    bobs.clock.install()
    bobs.goto(f"{site}/login/bob/")
    sent = Sent(bobs)
    with bobs.expect_response(is_stream) as opened:
        bobs.goto(f"{site}{TOPIC}")
    assert opened.value.status == 204
    failures_taken_in(bobs)
    # A moment ahead of the page's clock, which runs on while the test asks it the time.
    now = bobs.evaluate("Date.now()") / 1000 + 0.25
    bobs.clock.pause_at(datetime.fromtimestamp(now, tz=timezone.utc))
    expect(widget_list(bobs)).to_have_text("bob")

    alices = open_page()
    alices.goto(f"{site}/login/alice/")
    alices.goto(f"{site}{TOPIC}")
    with bobs.expect_response(lambda response: "/online/widgets/" in response.url):
        bobs.clock.run_for(1_000)
    expect(widget_list(bobs)).to_have_text("alice and bob")

    with bobs.expect_response(is_stream) as again:
        bobs.clock.run_for(5_000)  # the first failure's wait
    assert again.value.status == 204
    for _ in range(60):  # a minute: the next tries come after 10, 20 and 40 s more
        failures_taken_in(bobs)
        bobs.clock.run_for(1_000)
    until(bobs, lambda: opened_streams(sent) >= 4)
    assert opened_streams(sent) == 4  # 0, 5, 15 and 35 s; the next at 75 s
    # and once, after the first, a request that asks why (204: nothing to say in the console)
    assert sent.to(STREAM) == 5

    alices.goto(f"{site}/plain/")  # alice leaves: the polls still bring it
    bobs.clock.run_for(1_000)
    expect(widget_list(bobs)).to_have_text("bob")


def test_a_stream_refused_with_503_is_polled_instead_and_tried_again_after_the_back_off(
    site, open_page: Pages, settings, alice, bob
):
    """Past a cap on open streams, or while its process stops, the stream view answers 503 with
    ``Retry-After``, which ``EventSource`` cannot read: the page polls at once, as for any
    stream that cannot be opened, and tries the stream again after 5 s, then after longer and
    longer waits. The refusals are the test's; the page's timers are moved by the test."""
    configure(settings, LIVE_UPDATES=True)
    open_page.allow("status of 503")  # the browser logs each refusal
    bobs = open_page()
    bobs.add_init_script(STREAM_EVENTS)
    bobs.clock.install()
    bobs.goto(f"{site}/login/bob/")
    sent = Sent(bobs)
    refused: list[str] = []

    def refuse(route: Route) -> None:
        if route.request.resource_type == "eventsource":  # not the page's request asking why
            refused.append(route.request.url)
        route.fulfill(
            status=503,
            headers={"Retry-After": "30", "Connection": "close"},
            content_type="text/plain; charset=utf-8",
            body="Too many live streams are open; the page polls meanwhile.",
        )

    bobs.route(f"**{STREAM}?*", refuse)
    try:
        bobs.goto(f"{site}{TOPIC}")
        until(bobs, lambda: len(refused) == 1)
        failures_taken_in(bobs)
        # A moment ahead of the page's clock, as above: 0.05 s was passed on a busy machine.
        now = bobs.evaluate("Date.now()") / 1000 + 0.25
        bobs.clock.pause_at(datetime.fromtimestamp(now, tz=timezone.utc))
        expect(widget_list(bobs)).to_have_text("bob")

        alices = open_page()
        alices.goto(f"{site}/login/alice/")
        alices.goto(f"{site}{TOPIC}")
        with bobs.expect_response(lambda response: "/online/widgets/" in response.url):
            bobs.clock.run_for(1_000)  # polled, the stream refused
        expect(widget_list(bobs)).to_have_text("alice and bob")

        for _ in range(60):  # a minute: tries after 5, 10, 20 and 40 s more
            failures_taken_in(bobs)
            bobs.clock.run_for(1_000)
        until(bobs, lambda: opened_streams(sent) >= 4)
        assert len(refused) == opened_streams(sent) == 4  # 0, 5, 15 and 35 s; the next at 75 s
    finally:
        bobs.unroute_all(behavior="ignoreErrors")


def test_a_stream_that_ends_is_renewed_and_opened_again(
    site, open_page: Pages, settings, alice, bob
):
    """The stream says its token ran out ("end"): the page fetches itself in the background for
    fresh tokens, polls meanwhile (a stream that ends as soon as it opens counts as failed), and
    opens a new one after the back-off. The stream is the widgets view's answer, sent by the
    test, then "end"."""
    configure(settings, LIVE_UPDATES=True, REFRESH_INTERVAL=600)
    page = open_page()
    page.goto(f"{site}/login/alice/")
    sent = Sent(page)
    streams: list[str] = []

    def ending(route: Route) -> None:
        streams.append(route.request.url)
        state = route.fetch(url=route.request.url.replace(STREAM, "/online/widgets/")).text()
        body = f"data: {state}\n\nevent: end\ndata: \n\n"
        route.fulfill(status=200, content_type="text/event-stream", body=body)

    page.route(f"**{STREAM}?*", ending)
    try:
        with page.expect_request(is_renewal):
            page.goto(f"{site}{TOPIC}")
        expect(widget_list(page)).to_have_text("alice")
        until(page, lambda: sent.to("/online/widgets/") == 1)  # polled while the stream waits
        whos_online.record_user(bob, room="topic:1")
        with page.expect_request(lambda request: urlsplit(request.url).path == STREAM):
            pass  # the next try, 5 s after the first
        expect(widget_list(page)).to_have_text("bob and alice")
        assert len(streams) == 2
    finally:
        page.unroute_all(behavior="ignoreErrors")
