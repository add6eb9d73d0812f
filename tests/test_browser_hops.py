"""Two readers hopping between rooms, in Chromium, on the test site under uvicorn with two
workers (its application in ``whos_online.asgi.LiveStreams``): each reader is in "Here now" on
their own page half a second and three seconds after every load, and again within five seconds
of Redis coming back from a restart without its data.

The site runs the load test's settings with the kept snapshot at its default
(``SNAPSHOT_MAX_AGE``) and refreshes so rare that every later state a page shows is its
stream's, on a redis-server of the module's own (the restart test kills it; the session's is
shared). Each page is a fresh navigation in a browser context of its own that has only its
user's session cookie, as a new tab without the throttle cookie: its visit is written after its
render, and its stream opens while the other reader's moves have either worker reading. The
browser and the pages (a strict CSP; any script error fails the test) are tests/test_browser.py's.

``WHOS_ONLINE_HOPS`` page loads are checked (16 unless set); ``-s`` prints the figures. A failure
tells each page's workers, texts and stream events, and the site's log.
"""

from __future__ import annotations

import os
import random
import re
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import pytest
import redis

from tests import test_browser
from tests.support import wsgi_server
from tests.support.redis_server import RedisServer, running
from tests.test_browser import ROOT, STREAM, USER_AGENT
from tests.test_browser_live import LIVE_STREAMS_APPLICATION, PREPARE, nearest_rank
from whos_online.config.settings import DEFAULTS

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from pathlib import Path

    from playwright.sync_api import Browser, Page
    from playwright.sync_api import Response as PlaywrightResponse

    from tests.test_browser import Pages

pytestmark = [
    pytest.mark.browser,
    pytest.mark.slow,
    pytest.mark.skipif(sys.platform == "win32", reason="uvicorn's workers run on Unix here"),
]

#: tests/test_browser.py's fixtures: its Chromium and its pages.
browser, open_page = test_browser.browser, test_browser.open_page
#: tests/test_browser_live.py's site with the kept snapshot at its default; every answer says
#: which worker served it, and the log says when and in which worker.
SETTINGS = """from tests.load_settings import *

MIDDLEWARE = ["served_by.ServedBy", *MIDDLEWARE]
WHOS_ONLINE = {
    **WHOS_ONLINE,
    "TRUSTED_PROXY_COUNT": 0,
    "REFRESH_INTERVAL": 600,
    "SHOW_NAMES_TO": "authenticated",
}
LOGGING["formatters"] = {"timed": {"format": "%(created).3f worker %(process)d: %(message)s"}}
LOGGING["handlers"]["stderr"]["formatter"] = "timed"
LOGGING["loggers"]["whos_online"]["level"] = "INFO"
"""
SERVED_BY = """import os

from asgiref.sync import iscoroutinefunction, markcoroutinefunction


class ServedBy:
    sync_capable = async_capable = True

    def __init__(self, get_response):
        self.get_response = get_response
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request):
        if self.is_async:
            return self._served_async(request)
        return self._mark(self.get_response(request))

    async def _served_async(self, request):
        return self._mark(await self.get_response(request))

    def _mark(self, response):
        response["X-Served-By"] = str(os.getpid())
        return response
"""
USERS = ("alice", "bob")
TOPICS = (1, 2, 3)
LOADS = int(os.environ.get("WHOS_ONLINE_HOPS", "16"))
#: Seconds after a load at which its reader must be in "Here now" on it.
CHECKS = (0.5, 3.0)
#: Seconds a reader stays on a page: its last check, and a little for the page to report it.
DWELL = CHECKS[-1] + 0.3
#: Seconds after Redis is back within which each reader who stayed is shown again.
BACK_WITHIN = 5.0
#: Generous, for a busy CI machine: waits end as soon as what they wait for comes.
WAIT = 15.0
WIDGETS = "/online/widgets/"
#: Installed in every page before its own scripts: records each text the widget's list shows,
#: from the server's render on, and each event of the page's stream, by the page's clock (this
#: machine's: ``Date.now()`` and ``time.time()`` agree).
WATCH = """(() => {
  const texts = (window.whosOnlineTexts = []);
  const events = (window.whosOnlineEvents = []);
  const note = () => {
    const list = document.querySelector(".whos-online .whos-online-list");
    if (list && (!texts.length || texts[texts.length - 1].text !== list.textContent)) {
      texts.push({ at: Date.now() / 1000, text: list.textContent });
    }
  };
  new MutationObserver(note).observe(document, {
    subtree: true, childList: true, characterData: true, attributes: true,
  });
  const Native = window.EventSource;
  window.EventSource = function (url, options) {
    const source = new Native(url, options);
    ["open", "message", "stale", "end", "error"].forEach((type) => {
      source.addEventListener(type, () => events.push({ at: Date.now() / 1000, type: type }));
    });
    return source;
  };
  window.EventSource.prototype = Native.prototype;
})();"""


@dataclass(frozen=True)
class Site:
    url: str
    log: Path


@pytest.fixture(scope="module")
def own_redis() -> Iterator[RedisServer]:
    """A redis-server of this module's own, for the site: the restart test kills it."""
    with running() as server:
        yield server


@pytest.fixture(scope="module")
def two_workers(own_redis: RedisServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    """The test site under uvicorn with two workers, users alice and bob in its database."""
    directory = tmp_path_factory.mktemp("hops")
    (directory / "hops_settings.py").write_text(SETTINGS)
    (directory / "served_by.py").write_text(SERVED_BY)
    (directory / "live_asgi.py").write_text(LIVE_STREAMS_APPLICATION)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(directory), str(ROOT)]),
        "DJANGO_SETTINGS_MODULE": "hops_settings",
        "WHOS_ONLINE_LOAD_DB": str(directory / "hops.sqlite3"),
        "REDIS_URL": own_redis.url,
    }
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    subprocess.run([sys.executable, "-c", PREPARE], cwd=ROOT, env=env, check=True)
    log = directory / "uvicorn.log"
    with wsgi_server.uvicorn(
        env, log, ready_path="/plain/", workers=2, factory="live_asgi:application"
    ) as (port, _process):
        yield Site(f"http://127.0.0.1:{port}", log)


@pytest.fixture(scope="module")
def sessions(browser: Browser, two_workers: Site) -> dict[str, dict[str, Any]]:
    """Each user's session cookie, from a login in a context that is then closed."""
    found = {}
    for user in USERS:
        context = browser.new_context(user_agent=USER_AGENT)
        try:
            context.new_page().goto(f"{two_workers.url}/login/{user}/")
            (cookie,) = [c for c in context.cookies() if c["name"] == "sessionid"]
        finally:
            context.close()
        found[user] = dict(cookie)
    return found


@dataclass
class Load:
    """A page of a topic that a reader loaded, and what it showed."""

    reader: str
    topic: int
    page: Page
    #: The worker that rendered the page, and the one that serves its stream.
    rendered_by: str = ""
    streamed_by: str = ""
    texts: list[tuple[float, str]] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)
    #: When the answers to its polls came.
    polls: list[float] = field(default_factory=list)

    @property
    def loaded_at(self) -> float:
        """When the page first showed its widget: the server's render."""
        return self.texts[0][0]

    def read(self) -> Load:
        self.texts = [(e["at"], e["text"]) for e in self.page.evaluate("window.whosOnlineTexts")]
        self.events = [(e["at"], e["type"]) for e in self.page.evaluate("window.whosOnlineEvents")]
        return self

    def text_at(self, moment: float) -> str:
        return [text for at, text in self.texts if at <= moment][-1]

    def shows_reader_at(self, moment: float) -> bool:
        return re.search(rf"\b{self.reader}\b", self.text_at(moment)) is not None

    def first(self, kind: str, after: float) -> float | None:
        """When the stream's first event of ``kind`` after ``after`` came, if one did."""
        return next((at for at, name in self.events if name == kind and at > after), None)

    def story(self, since: float) -> str:
        """Its workers, texts, stream events and polls, in seconds after ``since`` (Unix time,
        as the site's log has it)."""
        lines = [
            f"{self.reader} on topic {self.topic} at {since:.3f}, rendered by worker "
            f"{self.rendered_by}, streamed by {self.streamed_by or 'none'}"
        ]
        moments = [(at, f"shows {text!r}") for at, text in self.texts]
        moments += [(at, f"stream event {name}") for at, name in self.events]
        moments += [(at, "poll answered") for at in self.polls]
        lines += [f"  {at - since:+.2f} s {what}" for at, what in sorted(moments)]
        return "\n".join(lines)


def load(pages: Pages, site: Site, cookie: dict[str, Any], reader: str, topic: int) -> Load:
    """``reader`` opens ``topic`` in a fresh context that has only their session cookie."""
    page = pages()
    page.context.add_cookies([cookie])  # type: ignore [list-item]
    page.context.add_init_script(WATCH)
    loaded = Load(reader, topic, page)

    def answered(response: PlaywrightResponse) -> None:
        path = urlsplit(response.url).path
        if path == STREAM:
            loaded.streamed_by = response.headers.get("x-served-by", "?")
        elif path == WIDGETS:
            loaded.polls.append(time.time())

    page.on("response", answered)
    response = page.goto(f"{site.url}/topics/{topic}/")
    assert response is not None
    assert response.status == 200
    loaded.rendered_by = response.headers["x-served-by"]
    return loaded.read()


def leave(pages: Pages, loaded: Load) -> None:
    """The reader closes the page, and its context: their next page is in a fresh one."""
    context = loaded.page.context
    pages.contexts.remove(context)
    # As tests/test_browser.py's open_page does: a request may still be in the route handler.
    context.unroute_all(behavior="ignoreErrors")
    context.close()


def wait_until(page: Page, moment: float) -> None:
    """Until ``moment`` (Unix time), letting Playwright take in its events meanwhile."""
    left = moment - time.time()
    if left > 0:
        page.wait_for_timeout(left * 1000)


def until(loaded: Load, happened: Callable[[Load], bool]) -> None:
    """Until ``happened(loaded)`` is true of what the page recorded."""
    deadline = time.time() + WAIT
    while not happened(loaded.read()):
        assert time.time() < deadline, loaded.story(loaded.loaded_at)
        loaded.page.wait_for_timeout(50)


def misses(loaded: Load) -> list[float]:
    """The checks (seconds after its load) at which a page did not show its reader."""
    loaded.read()
    assert time.time() >= loaded.loaded_at + CHECKS[-1]
    return [check for check in CHECKS if not loaded.shows_reader_at(loaded.loaded_at + check)]


def test_readers_hopping_between_rooms_are_on_their_own_page(two_workers, open_page, sessions):
    """Round after round, alice then bob (a fraction of a second later) leave the topic they are
    on for another: each page shows its reader at 0.5 s and at 3 s, whichever worker rendered
    it, serves its stream, or read the snapshot its stream's first state came from."""
    wait_out_back_offs(two_workers)
    route = random.Random(0)
    here: dict[str, Load] = {}
    checked: list[tuple[Load, list[float]]] = []
    while len(checked) + len(here) < LOADS:
        for reader in USERS:
            previous = here.get(reader)
            if previous is not None:
                wait_until(previous.page, previous.loaded_at + DWELL)
                checked.append((previous, misses(previous)))
                leave(open_page, previous)
            topics = [topic for topic in TOPICS if previous is None or topic != previous.topic]
            here[reader] = load(
                open_page, two_workers, sessions[reader], reader, route.choice(topics)
            )
    for loaded in here.values():
        wait_until(loaded.page, loaded.loaded_at + DWELL)
        checked.append((loaded, misses(loaded)))

    report_hops(checked)
    missed = [f"at {at} s: {loaded.story(loaded.loaded_at)}" for loaded, at in checked if at]
    assert not missed, "\n".join([*missed, "The site's log:", two_workers.log.read_text()])


#: A worker's log line saying that it found Redis down, and when.
UNAVAILABLE = re.compile(r"^(\d+\.\d+) worker \d+: Redis at .* is unavailable", re.MULTILINE)


def wait_out_back_offs(site: Site) -> None:
    """Wait until no worker is in its back-off: the restart test, when it runs first, leaves a
    worker that found Redis down writing nothing and showing empty counts for FAILURE_BACKOFF
    (10 s), as it should, which is not what this test is about."""
    found = [float(at) for at in UNAVAILABLE.findall(site.log.read_text())]
    if found:
        until = max(found) + DEFAULTS["FAILURE_BACKOFF"] + 0.5
        time.sleep(max(0.0, until - time.time()))


def report_hops(checked: list[tuple[Load, list[float]]]) -> None:
    firsts = [
        first - loaded.loaded_at
        for loaded, _ in checked
        if (first := loaded.first("message", loaded.loaded_at)) is not None
    ]
    missed = {check: sum(check in at for _, at in checked) for check in CHECKS}
    across = sum(loaded.rendered_by != loaded.streamed_by for loaded, _ in checked)
    changed = sum(len({text for _, text in loaded.texts}) > 1 for loaded, _ in checked)
    print(
        f"\n{len(checked)} page loads checked: {missed[0.5]} missed their reader at 0.5 s, "
        f"{missed[3.0]} at 3 s; {across} streamed by the worker that had not rendered them; "
        f"{changed} changed their text; first state on the stream after "
        + (
            f"median {statistics.median(firsts):.2f} s, p95 {nearest_rank(firsts, 95):.2f} s, "
            f"max {max(firsts):.2f} s ({len(firsts)} pages)"
            if firsts
            else "none"
        )
    )


def test_readers_who_stay_are_shown_again_soon_after_redis_restarts_empty(
    two_workers, own_redis: RedisServer, open_page, sessions
):
    """alice and bob stay on topic 1 while Redis is killed, and started again without its data
    once each page has polled since (answered from a worker that found Redis down) or been told
    again that its stream is stale (a page whose stream a busy machine made stale before the
    kill polled then, and polls again only when the stream comes back). Within 5 s of Redis
    coming back, each page has had a state from its stream and shows its reader, and Redis
    holds both readers again."""
    pages = {reader: load(open_page, two_workers, sessions[reader], reader, 1) for reader in USERS}
    for loaded in pages.values():
        until(loaded, lambda page: page.first("message", 0) is not None)

    assert own_redis.process is not None
    killed = time.time()
    own_redis.process.kill()
    own_redis.process.wait(timeout=10)
    for loaded in pages.values():
        until(
            loaded,
            lambda page: (
                any(at > killed for at in page.polls) or page.first("stale", killed) is not None
            ),
        )
    own_redis.start()  # on the same port, empty
    back = time.time()
    wait_until(pages["bob"].page, back + BACK_WITHIN)
    held = redis.Redis.from_url(own_redis.url).zrange("{whos_online}:room:topic:1:users", 0, -1)
    found = what_redis_holds(own_redis)

    failures = []
    for loaded in pages.values():
        loaded.read()
        state = loaded.first("message", back)
        print(
            f"\n{loaded.reader}: Redis down for {back - killed:.2f} s; the stream's first state "
            + (f"{state - back:.2f} s after it was back" if state else "never came")
            + f"; at {BACK_WITHIN:g} s the page showed {loaded.text_at(back + BACK_WITHIN)!r}"
        )
        shown = loaded.shows_reader_at(back + BACK_WITHIN)
        if state is None or state > back + BACK_WITHIN or not shown:
            failures.append(loaded.story(back))
    if sorted(held) != [b"1", b"2"]:  # alice and bob, recorded again
        failures += [loaded.story(back) for loaded in pages.values()]
        failures.append(f"Redis holds {found}")
    assert not failures, "\n".join([*failures, "The site's log:", two_workers.log.read_text()])


def what_redis_holds(server: RedisServer) -> dict[str, Any]:
    """Who is online and where, as Redis says: for a failure's message."""
    client = redis.Redis.from_url(server.url, decode_responses=True)
    return {
        "site": client.zrange("{whos_online}:users", 0, -1),
        "where": client.hgetall("{whos_online}:rooms:where"),
        **{
            f"topic {topic}": client.zrange(f"{{whos_online}}:room:topic:{topic}:users", 0, -1)
            for topic in TOPICS
        },
    }
