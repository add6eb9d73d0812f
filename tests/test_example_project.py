"""The example project, as a person trying it would see it: its user admin shows who is online,
its /metrics page serves the Prometheus collector, and its home page spells out the counts and
a cleanup command that works.

It runs in a process of its own, on its own settings (a database in memory, the session's real
redis-server), so that nothing of the test settings leaks into it.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

# Each test starts the example site in processes of its own.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = r"""
import html
import io
import re

import example_project.settings as site
site.DATABASES["default"]["NAME"] = ":memory:"
# Every page reads Redis, so that a page shows the visit made just before it.
site.WHOS_ONLINE["SNAPSHOT_MAX_AGE"] = 0
import django
django.setup()
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.test import Client

call_command("migrate", verbosity=0)
boss = get_user_model().objects.create_superuser("boss", password="pw")
get_user_model().objects.create_user("idle")
browser = Client()
browser.force_login(boss)
browser.get("/")  # the boss is online now

admin = browser.get("/admin/auth/user/?online_now=yes").content.decode()
assert "Online now" in admin and "Last seen" in admin, admin
assert ">boss</a>" in admin and ">idle</a>" not in admin, admin

metrics = Client().get("/metrics")
assert metrics.status_code == 200
text = metrics.content.decode()
assert 'whos_online_online{kind="users"} 1.0' in text, text
assert "whos_online_redis_up 1.0" in text, text


guest = Client(HTTP_USER_AGENT="Mozilla/5.0 (X11; Linux x86_64) Firefox/130.0")


def right_now() -> str:
    page = guest.get("/").content.decode()
    found = re.search(r"People online: <strong>\d+</strong>\s*\(([^)]*)\)", page)
    assert found, page
    return " ".join(found.group(1).split())


# A page counts its own viewer in: the guest's first page counts the guest, and so does the next.
assert (first := right_now()) == "1 logged in, 1 guest, 0 bots", first
assert (second := right_now()) == "1 logged in, 1 guest, 0 bots", second

# The forum: each topic is a room, and its page says who is reading it.
call_command("whos_online_demo", stdout=io.StringIO())


def readers(client: Client, topic: int) -> str:
    page = client.get(f"/forum/topics/{topic}/").content.decode()
    found = re.search(r'<aside class="readers">(.*?)</aside>', page, re.S)
    assert found, page
    text = html.unescape(re.sub(r"<[^>]+>", " ", found.group(1)))
    return " ".join(text.split())


browser.get("/forum/topics/1/")  # the boss reads topic 1 (ROOMS names its URL)
# A guest sees counts, and logged-in users the names (SHOW_NAMES_TO "authenticated"); each page
# counts its own reader in.
assert (reading := readers(guest, 1)) == "Here now: 1 user and 1 guest", reading
assert (reading := readers(browser, 1)) == "Here now: boss and 1 guest", reading
browser.get("/forum/topics/2/")  # the boss moves: out of topic 1 at once
assert (reading := readers(guest, 1)) == "Here now: 1 guest", reading
assert (reading := readers(browser, 2)) == "Here now: boss", reading
# A page without a room takes its reader out of theirs, once it has been shown.
forum = browser.get("/forum/").content.decode()
assert forum.count("(1 reading)") == 2, forum

hint = re.search(r'<code class="cleanup-command">([^<]*)</code>', guest.get("/").content.decode())
assert hint, "no cleanup command on the home page"
print("ok")
print(html.unescape(hint.group(1)))
"""


def run_example(real_redis_url: str) -> str:
    """Run SCRIPT on a fresh database and the given Redis; returns the home page's cleanup
    command."""
    redis.Redis.from_url(real_redis_url).flushdb()
    env = {
        **os.environ,
        "REDIS_URL": real_redis_url,
        "DJANGO_SETTINGS_MODULE": "example_project.settings",
        "ALLOWED_HOSTS": "testserver",
    }
    result = subprocess.run(
        [sys.executable, "-c", SCRIPT],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    ok, hint = result.stdout.strip().splitlines()
    assert ok == "ok"
    return hint


def test_the_admin_metrics_and_home_page_of_the_example_project(real_redis_url):
    run_example(real_redis_url)


def test_the_cleanup_command_on_the_home_page_cleans_the_sites_redis(real_redis_url):
    """The site's Redis URL is known to the site's process only (scripts/dev.py starts a
    redis-server on a free port): the command must carry it, and run as given."""
    hint = run_example(real_redis_url)
    assert hint.startswith(f"REDIS_URL={real_redis_url} ")
    assert hint.endswith(" manage.py whos_online_cleanup")
    site_redis = redis.Redis.from_url(real_redis_url)
    site_redis.delete("{whos_online}:counters-cleaned")
    # As in a newcomer's second terminal: none of the site's environment.
    env = {
        name: value
        for name, value in os.environ.items()
        if name not in {"REDIS_URL", "DJANGO_SETTINGS_MODULE"}
    }

    result = subprocess.run(
        ["/bin/sh", "-c", hint],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert "Removed" in result.stdout
    assert site_redis.exists("{whos_online}:counters-cleaned")
