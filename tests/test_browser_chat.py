"""The example site's chat in Chromium, under uvicorn as ``scripts/dev.py example`` serves it: a
person is in the chat while any tab of theirs holds its WebSocket open, whatever page they read in
another tab, and leaves it with their last one.

The browser is tests/test_browser.py's (Chromium from Debian), its pages the example's as a
newcomer opens them (the example's own inline styles, no strict policy); the site is the
example's own settings with a database of its own, on the session's real Redis; the widgets
follow the live stream, as they do under uvicorn.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING

import pytest
import redis
from playwright.sync_api import expect

from tests import test_browser
from tests.support import wsgi_server
from tests.test_browser import EXAMPLE_SETTINGS, ROOT, TIMEOUT_MS, example_page, widget_list

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from playwright.sync_api import Page

pytestmark = [
    pytest.mark.browser,
    pytest.mark.parametrize("backend", ["real"], indirect=True),
    pytest.mark.skipif(sys.platform == "win32", reason="uvicorn's workers run on Unix here"),
]

browser = test_browser.browser
#: The example's ASGI application (Channels' router), for uvicorn's ``--factory``.
FACTORY = """def application():
    from example_project.asgi import application

    return application
"""


@pytest.fixture(scope="module")
def chat_site(real_redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The example site under uvicorn, with its demo users."""
    directory = tmp_path_factory.mktemp("chat")
    database = str(directory / "example.sqlite3")
    (directory / "chat_settings.py").write_text(EXAMPLE_SETTINGS.format(database=database))
    (directory / "chat_asgi.py").write_text(FACTORY)
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(directory), str(ROOT)]),
        "DJANGO_SETTINGS_MODULE": "chat_settings",
        "REDIS_URL": real_redis_url,
    }
    env.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
    for step in (["migrate", "--noinput"], ["whos_online_demo"]):
        subprocess.run(
            [sys.executable, "manage.py", *step], cwd=ROOT, env=env, check=True, capture_output=True
        )
    with wsgi_server.uvicorn(
        env,
        directory / "uvicorn.log",
        ready_path="/accounts/login/",
        factory="chat_asgi:application",
    ) as (port, _process):
        yield f"http://127.0.0.1:{port}"


def log_in(page: Page, site: str, username: str) -> None:
    test_browser.log_in(page, site, username)
    expect(page.locator("header .user strong")).to_have_text(username)


def open_chat(page: Page, site: str) -> None:
    page.goto(f"{site}/chat/")
    expect(page.locator("#chat-form")).to_have_attribute("data-state", "open")


def sockets_of(redis_url: str, username: str) -> int:
    """How many sockets of the user the site holds in rooms, as its Redis says (the example's
    key prefix; the user found by the name their display HASH keeps)."""
    site = redis.Redis.from_url(redis_url, decode_responses=True)
    for key in site.scan_iter("{whos_online}:links:u:*"):
        pk = str(key).rpartition(":")[2]
        if site.hget(f"{{whos_online}}:user:{pk}", "name") == username:
            return int(site.zcard(key))
    return 0


def until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + TIMEOUT_MS / 1000
    while not condition():
        assert time.monotonic() < deadline, "the condition never came true"
        time.sleep(0.05)


def test_two_tabs_and_a_page_in_between_hold_the_chat_until_the_last_tab_closes(
    backend, browser, chat_site, real_redis_url
):
    bobs = example_page(browser, 1366)
    log_in(bobs, chat_site, "bob")
    open_chat(bobs, chat_site)
    in_chat = widget_list(bobs).first  # the chat's widget; the footer's is the site's
    expect(in_chat).to_have_text("bob")

    first = example_page(browser, 1366)
    log_in(first, chat_site, "alice")
    open_chat(first, chat_site)
    second = first.context.new_page()  # a second tab of alice's browser
    open_chat(second, chat_site)
    expect(in_chat).to_contain_text("alice", timeout=TIMEOUT_MS)
    until(lambda: sockets_of(real_redis_url, "alice") == 2)

    elsewhere = first.context.new_page()  # alice reads the forum in a third tab
    elsewhere.goto(f"{chat_site}/forum/")
    first.close()  # one of her two sockets closes
    until(lambda: sockets_of(real_redis_url, "alice") == 1)
    bobs.reload()  # the chat as it is now, read afresh
    expect(widget_list(bobs).first).to_contain_text("alice")

    second.close()  # her last one
    expect(widget_list(bobs).first).to_have_text("bob", timeout=TIMEOUT_MS)
    expect(widget_list(elsewhere).first).to_contain_text("alice")  # online on the site still
