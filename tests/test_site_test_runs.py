"""A site's own test run leaves the live presence data as it found it, byte for byte.

A throw-away site (whos_online installed as the docs say, its middleware, a page with the tag
and a room) is written into a temporary directory, with ``REDIS_URL`` pointing at the real test
Redis, which holds some live data first. Its tests make requests as a guest and log a user in;
they run under Django's runner (with ``--parallel``, where multiprocessing can run it) and under
pytest-django, each in a process of its own. A ``DUMP`` of every key before and after must be
the same, with no key more. With ``ISOLATE_TESTS`` False the same run writes the live data.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import sys
import textwrap
from importlib.util import find_spec
from typing import TYPE_CHECKING, Any

import pytest

import whos_online
from tests.support.helpers import configure, single_redis, text
from tests.support.processes import run

if TYPE_CHECKING:
    from pathlib import Path

    import redis

pytestmark = pytest.mark.slow

SITE = {
    "site_settings.py": """
        import json
        import os
        from pathlib import Path

        SECRET_KEY = "a site's own secret"
        USE_TZ = True
        ROOT_URLCONF = "site_urls"
        DEFAULT_AUTO_FIELD = "django.db.models.AutoField"
        INSTALLED_APPS = [
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "whos_online",
        ]
        MIDDLEWARE = [
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "whos_online.middleware.WhosOnlineMiddleware",
        ]
        DATABASES = {
            "default": {
                "ENGINE": "django.db.backends.sqlite3",
                "NAME": Path(__file__).parent / "db.sqlite3",
            }
        }
        TEMPLATES = [
            {
                "BACKEND": "django.template.backends.django.DjangoTemplates",
                "DIRS": [Path(__file__).parent / "templates"],
                "APP_DIRS": True,
                "OPTIONS": {"context_processors": ["django.template.context_processors.request"]},
            }
        ]
        PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
        WHOS_ONLINE = {
            "REDIS_URL": os.environ["SITE_REDIS_URL"],
            "ROOMS": {"about": "page:about"},
            # A test that asserts who another visitor sees reads Redis for every render.
            "SNAPSHOT_MAX_AGE": 0,
            **json.loads(os.environ.get("SITE_WHOS_ONLINE", "{}")),
        }
    """,
    "site_urls.py": """
        from django.shortcuts import render
        from django.urls import path

        def page(request):
            return render(request, "page.html")

        urlpatterns = [path("", page, name="home"), path("about/", page, name="about")]
    """,
    "templates/page.html": """
        {% load whos_online %}<main>{% whos_online visitors=True %}</main>
    """,
    "test_site.py": """
        import json
        import os

        import redis
        from django.contrib.auth.models import User
        from django.test import Client, TestCase

        def report(test):
            # What the site's Redis holds beyond the live data, as this test ends.
            client = redis.Redis.from_url(os.environ["SITE_REDIS_URL"])
            live = set(json.loads(os.environ["SITE_LIVE_KEYS"]))
            added = sorted(key.decode() for key in client.scan_iter() if key.decode() not in live)
            with open(os.environ["SITE_REPORT"], "a") as file:
                file.write(json.dumps({"test": test, "pid": os.getpid(), "added": added}) + "\\n")

        class GuestTests(TestCase):
            def test_a_guest_reads_pages(self):
                for path in ["/", "/about/", "/", "/about/"]:
                    self.assertEqual(self.client.get(path).status_code, 200)
                report("guest")

        class UserTests(TestCase):
            def test_a_user_logs_in_and_others_see_them(self):
                User.objects.create_user("alice", password="pw")
                self.assertTrue(self.client.login(username="alice", password="pw"))
                self.assertEqual(self.client.get("/about/").status_code, 200)
                # Another visitor's page shows her: she was written to Redis, and read back.
                self.assertContains(Client().get("/about/"), "alice")
                report("user")
    """,
    "pytest.ini": """
        [pytest]
        DJANGO_SETTINGS_MODULE = site_settings
        python_files = test_site.py
        addopts = -p no:cacheprovider
    """,
}

#: The names of keys a test process writes under the default KEY_PREFIX.
TEST_KEY = re.compile(r"\{test_whos_online_[0-9a-f]{8}[}:]")


@pytest.fixture
def live(settings, real_redis_url, db) -> redis.Redis:
    """The real Redis, holding the live data of the site: a guest in a room, a user, a counter of
    the site's own, the peak and today's unique visitors."""
    configure(settings, REDIS_URL=real_redis_url, ISOLATE_TESTS=False)
    client = single_redis()
    client.flushdb()
    from django.contrib.auth import get_user_model

    whos_online.record_guest("198.51.100.7", room="page:about")
    whos_online.record_user(get_user_model().objects.create_user("bob"), room="page:about")
    whos_online.update_counter("signups")
    assert whos_online.flush() is True
    assert whos_online.online_counts().total == 2
    return client


def dump(client: redis.Redis) -> dict[str, tuple[bytes | None, bool]]:
    """Every key, with its serialized value and whether it expires."""
    return {
        text(key): (client.dump(key), client.pttl(key) >= 0) for key in client.scan_iter(count=1000)
    }


def write_site(path: Path) -> None:
    for name, source in SITE.items():
        file = path / name
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_text(textwrap.dedent(source).lstrip())


def run_tests(
    site: Path, command: list[str], redis_url: str, live_keys: list[str], **whos_online: object
) -> list[dict[str, Any]]:
    """Run the site's tests with ``command`` in a process of its own; returns what each test
    reported."""
    report = site / "report.jsonl"
    report.unlink(missing_ok=True)
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("PYTEST_", "DJANGO_", "COV_", "COVERAGE_"))
    }
    env.update(
        DJANGO_SETTINGS_MODULE="site_settings",
        PYTHONPATH=str(site),
        SITE_REDIS_URL=redis_url,
        SITE_LIVE_KEYS=json.dumps(live_keys),
        SITE_REPORT=str(report),
        SITE_WHOS_ONLINE=json.dumps(whos_online),
    )
    result = run([sys.executable, *command], env=env, cwd=site)
    assert result.returncode == 0, result.stdout + result.stderr
    return [json.loads(line) for line in report.read_text().splitlines()]


def django_test_command() -> list[str]:
    # Django's runner starts its workers with fork or spawn only (forkserver runs them in turn).
    parallel = multiprocessing.get_all_start_methods()[0] in {"fork", "spawn"}
    return ["-m", "django", "test", "-v", "0", *(["--parallel", "2"] if parallel else [])]


RUNNERS = [
    pytest.param(django_test_command(), id="django"),
    pytest.param(
        ["-m", "pytest", "-q", "-p", "no:randomly"],
        id="pytest-django",
        marks=pytest.mark.skipif(find_spec("pytest_django") is None, reason="needs pytest-django"),
    ),
]


@pytest.mark.parametrize("command", RUNNERS)
def test_a_sites_test_run_leaves_the_live_keys_byte_identical(
    live, tmp_path, real_redis_url, command
):
    write_site(tmp_path)
    before = dump(live)

    reports = run_tests(tmp_path, command, real_redis_url, sorted(before))

    assert dump(live) == before
    # The tests ran and wrote, each process under a prefix of its own.
    assert sorted(each["test"] for each in reports) == ["guest", "user"]
    for each in reports:
        assert each["added"]
        assert all(TEST_KEY.match(key) for key in each["added"]), each["added"]


def test_with_isolate_tests_false_a_sites_test_run_writes_the_live_keys(
    live, tmp_path, real_redis_url
):
    write_site(tmp_path)
    before = dump(live)

    reports = run_tests(
        tmp_path, django_test_command(), real_redis_url, sorted(before), ISOLATE_TESTS=False
    )

    after = dump(live)
    assert after != before
    assert not any(TEST_KEY.match(key) for key in after)
    assert not any(TEST_KEY.match(key) for each in reports for key in each["added"])
    # alice and the test client's guest joined the live site's room.
    assert whos_online.online_counts(room="page:about").total > 2
