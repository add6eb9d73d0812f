"""The example project, as a person trying it would see it: its user admin shows who is online,
its /metrics page serves the Prometheus collector, and its home page spells out the counts and
a cleanup command that works.

It runs in a process of its own, on its own settings (a database in memory, the session's real
redis-server), so that nothing of the test settings leaks into it. That process has the test
dependencies, a superset of what ``python3 scripts/dev.py example`` installs: a test of the
noxfile's ``example`` session checks that it installs what the example imports.
"""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import sys
from importlib import metadata
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import redis
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.support.processes import run

ROOT = Path(__file__).resolve().parent.parent
#: Imported from the repository, not installed: the example's own code and what it runs.
LOCAL = {"example_project", "whos_online", "tests", "bench", "scripts"}

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
    result = run([sys.executable, "-c", SCRIPT], env=env)
    assert result.returncode == 0, result.stderr
    ok, hint = result.stdout.strip().splitlines()
    assert ok == "ok"
    return hint


# Each of these starts the example site in processes of its own.
@pytest.mark.slow
def test_the_admin_metrics_and_home_page_of_the_example_project(real_redis_url):
    run_example(real_redis_url)


@pytest.mark.slow
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

    result = run(["/bin/sh", "-c", hint], env=env)

    assert result.returncode == 0, result.stderr
    assert "Removed" in result.stdout
    assert site_redis.exists("{whos_online}:counters-cleaned")


def noxfile(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """The noxfile, loaded with a stand-in for nox (not a test dependency): its decorators hand
    the session functions back as they are."""

    def session(function=None, **options):
        return function if function is not None else (lambda decorated: decorated)

    stand_in = SimpleNamespace(
        options=SimpleNamespace(),
        session=session,
        parametrize=lambda *arguments, **options: lambda decorated: decorated,
        param=lambda *arguments, **options: arguments,
    )
    monkeypatch.setitem(sys.modules, "nox", stand_in)
    spec = importlib.util.spec_from_file_location("noxfile", ROOT / "noxfile.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def imported_distributions(paths: list[Path]) -> set[str]:
    """The installed distributions that the modules under ``paths`` import (at any depth)."""
    names: set[str] = set()
    for path in paths:
        for source in path.rglob("*.py") if path.is_dir() else [path]:
            for node in ast.walk(ast.parse(source.read_text())):
                if isinstance(node, ast.Import):
                    names.update(alias.name.partition(".")[0] for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.add(node.module.partition(".")[0])
    third_party = names - set(sys.stdlib_module_names) - LOCAL - {"__future__"}
    providers = metadata.packages_distributions()
    return {canonicalize_name(dist) for name in third_party for dist in providers.get(name, [name])}


def test_the_example_session_installs_everything_the_example_imports(monkeypatch):
    """/metrics answered 500 (no prometheus_client) when the session installed the package
    without its ``prometheus`` extra: the test run, with every test dependency, never saw it."""
    installed: list[str] = []
    session = SimpleNamespace(
        install=lambda *arguments: installed.extend(arguments),
        run=lambda *arguments, **options: None,
        posargs=[],
    )

    noxfile(monkeypatch).example(session)

    project = installed[installed.index("-e") + 1]
    found = re.fullmatch(r"\.(?:\[([\w,-]+)\])?", project)
    assert found, project
    extras = found.group(1).split(",") if found.group(1) else []
    requirements = [Requirement(line) for line in metadata.requires("whos-online") or []]
    environment = {
        canonicalize_name(requirement.name)
        for requirement in requirements
        if requirement.marker is None
        or any(requirement.marker.evaluate({"extra": extra}) for extra in ["", *extras])
    }
    groups = [installed[index + 1] for index, word in enumerate(installed) if word == "--group"]
    environment |= {canonicalize_name(Requirement(line).name) for line in group_lines(groups)}
    needed = imported_distributions([ROOT / "example_project", ROOT / "scripts" / "example.py"])
    assert {"django", "prometheus-client", "channels"} <= needed  # the search itself works
    assert sorted(needed - environment) == []


def group_lines(groups: list[str]) -> list[str]:
    """The requirements of the dependency groups ``groups`` of pyproject.toml, with those they
    include."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["dependency-groups"]
    lines: list[str] = []
    for group in groups:
        for entry in declared[group]:
            if isinstance(entry, dict):
                lines += group_lines([entry["include-group"]])
            else:
                lines.append(entry)
    return lines
