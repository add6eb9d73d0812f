"""Many concurrent clients through a real WSGI server against a real Redis, for a few seconds.

gunicorn serves the test site (tests/load_settings.py) with two worker processes of four threads
each, behind one "trusted proxy": every client sends its own address in ``X-Forwarded-For``. Fifty
client threads (users who log in, guests who keep cookies, guests and bots who drop them, some
over IPv6, some forging an address further left) request pages for a bounded time. Every response
must be a 200, the online counts must equal the distinct clients exactly, and the page hits
counter must equal the pages served once the workers have exited.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import http.client
import os
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import whos_online
from tests.support import wsgi_server
from tests.support.helpers import GOOGLEBOT

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parent.parent
#: How long the clients keep requesting.
DURATION = 3.0
USERS, GUESTS_WITH_COOKIES, GUESTS_WITHOUT, BOTS = 10, 20, 15, 5
BROWSER = "Mozilla/5.0 (X11; Linux x86_64; rv:125.0) Gecko/20100101 Firefox/125.0"
#: Run in the site's settings before gunicorn starts: the tables, and the users who log in.
PREPARE = f"""
import django
django.setup()
from django.core.management import call_command
from django.contrib.auth.models import User
call_command("migrate", verbosity=0)
User.objects.bulk_create([User(username=f"load{{n}}") for n in range({USERS})])
"""

pytestmark = [
    pytest.mark.load,
    pytest.mark.skipif(sys.platform == "win32", reason="gunicorn runs on Unix only"),
    pytest.mark.parametrize("backend", ["real"], indirect=True),
]


@dataclass
class Visitor:
    """One client: its address, what it sends, and what it got."""

    number: int
    kind: str  # "user", "guest" (keeps cookies), "cookieless" or "bot"
    cookies: dict[str, str] = field(default_factory=dict)
    statuses: list[int] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    @property
    def address(self) -> str:
        if self.number % 5 == 0:
            # A network of its own: one /64 is one guest (GUEST_IPV6_PREFIX).
            return f"2001:db8:10ad:{self.number:x}::1"
        return f"198.18.{(self.number + 1) // 256}.{(self.number + 1) % 256}"

    @property
    def forwarded_for(self) -> str:
        # What the client wrote itself, left of what the trusted proxy appended, changes nothing.
        forged = f"192.0.2.{self.number}, " if self.number % 3 == 0 else ""
        return forged + self.address

    def get(self, port: int, path: str) -> None:
        headers = {
            "X-Forwarded-For": self.forwarded_for,
            "User-Agent": GOOGLEBOT if self.kind == "bot" else BROWSER,
        }
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        try:
            connection.request("GET", path, headers=headers)
            response = connection.getresponse()
            body = response.read()
            self.statuses.append(response.status)
            if response.status != 200:
                self.errors.append(f"{path}: {response.status} {body[:200]!r}")
            if self.kind in {"user", "guest"}:
                self.keep(response.headers.get_all("Set-Cookie") or [])
        except (OSError, http.client.HTTPException) as error:
            self.errors.append(f"{path}: {type(error).__name__}: {error}")
        finally:
            connection.close()

    def keep(self, set_cookies: list[str]) -> None:
        for header in set_cookies:
            for name, morsel in SimpleCookie(header).items():
                if morsel["max-age"] == "0" or not morsel.value:
                    self.cookies.pop(name, None)
                else:
                    self.cookies[name] = morsel.value

    def run(self, port: int, deadline: float) -> None:
        if self.kind == "user":
            self.get(port, f"/login/load{self.number}/")
        pages = ("/", "/plain/")
        while time.monotonic() < deadline:
            self.get(port, pages[len(self.statuses) % 2])


def visitors() -> list[Visitor]:
    kinds = (
        ["user"] * USERS
        + ["guest"] * GUESTS_WITH_COOKIES
        + ["cookieless"] * GUESTS_WITHOUT
        + ["bot"] * BOTS
    )
    return [Visitor(number, kind) for number, kind in enumerate(kinds)]


def hits_counted() -> int:
    return sum(count for _, count in whos_online.get_counter("hits", 86400))


@contextlib.contextmanager
def serving(server: str, env: dict[str, str], log: Path) -> Iterator[int]:
    """Serve the site on a free port until the block ends; the whole process group is stopped.

    gunicorn runs the site as WSGI, two workers of four threads; uvicorn as ASGI, two workers,
    where the middleware records without leaving the event loop."""
    # A static path: ignored by the middleware, so that waiting for it records nobody.
    ready = "/static/app.css"
    try:
        if server == "gunicorn":
            with wsgi_server.gunicorn(env, log, ready_path=ready, threads=4) as (port, _):
                yield port
        else:
            with wsgi_server.uvicorn(env, log, ready_path=ready, workers=2) as (port, _):
                yield port
    except wsgi_server.GunicornError as error:
        pytest.fail(str(error))


@pytest.mark.parametrize("server", ["gunicorn", "uvicorn"])
def test_fifty_clients_through_a_real_server_are_counted_exactly(
    r, real_redis_url, tmp_path, server
):
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.load_settings",
        "REDIS_URL": real_redis_url,
        "WHOS_ONLINE_LOAD_DB": str(tmp_path / "load.sqlite3"),
        "PYTHONPATH": str(ROOT),
    }
    subprocess.run([sys.executable, "-c", PREPARE], cwd=ROOT, env=env, check=True, timeout=120)
    log = tmp_path / f"{server}.log"
    clients = visitors()

    with serving(server, env, log) as port:
        deadline = time.monotonic() + DURATION
        started = time.monotonic()
        threads = [threading.Thread(target=client.run, args=(port, deadline)) for client in clients]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(DURATION + 60)
        elapsed = time.monotonic() - started
        assert not any(thread.is_alive() for thread in threads)
        served = sum(len(client.statuses) for client in clients)

    # The workers were stopped (SIGTERM): each wrote the visits it still held as it exited (a
    # gunicorn worker at its exit, a uvicorn one from the signal on, since uvicorn ends its
    # processes by raising it again), so that nothing it recorded is missing.
    counts = whos_online.online_counts()
    rate = served / elapsed
    print(f"\n{served} requests by {len(clients)} clients in {elapsed:.1f} s: {rate:.0f}/s")
    errors = [error for client in clients for error in client.errors]
    assert errors == [], f"{len(errors)} errors, first ones: {errors[:5]}\n{log.read_text()}"
    assert all(len(client.statuses) >= 2 for client in clients)
    assert counts.users == USERS
    assert counts.guests == GUESTS_WITH_COOKIES + GUESTS_WITHOUT
    assert counts.bots == BOTS
    assert counts.total == USERS + GUESTS_WITH_COOKIES + GUESTS_WITHOUT
    names = sorted(user.name for user in whos_online.online_users())
    assert names == sorted(f"load{n}" for n in range(USERS))
    assert r.zcard("{whos_online}:users") == USERS
    assert r.zcard("{whos_online}:guests") == GUESTS_WITH_COOKIES + GUESTS_WITHOUT
    assert r.zcard("{whos_online}:bots") == BOTS
    # Once the workers have exited, every page served is in the hits counter, none twice.
    assert hits_counted() == served
    assert "Traceback" not in log.read_text()


#: Requests of the green-threads test, and how many go at once.
GREEN_REQUESTS, GREEN_CONCURRENCY = 300, 12


@pytest.mark.parametrize("preload", [True, False], ids=["preload", "no-preload"])
def test_gevent_workers_serve_and_count_every_request(r, real_redis_url, tmp_path, preload):
    """gunicorn's gevent workers, with the site loaded in the master before they fork and patch
    ``threading``: every request is answered, and every visit and page hit is written by the
    time the workers have exited."""
    pytest.importorskip("gevent")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.load_settings",
        "REDIS_URL": real_redis_url,
        "WHOS_ONLINE_LOAD_DB": str(tmp_path / "load.sqlite3"),
        "PYTHONPATH": str(ROOT),
    }
    subprocess.run([sys.executable, "-c", PREPARE], cwd=ROOT, env=env, check=True, timeout=120)
    log = tmp_path / "gevent.log"
    guests = [Visitor(number, "cookieless") for number in range(GREEN_REQUESTS)]

    with (
        wsgi_server.gunicorn(
            env, log, ready_path="/static/app.css", worker_class="gevent", preload=preload
        ) as (port, _),
        concurrent.futures.ThreadPoolExecutor(GREEN_CONCURRENCY) as pool,
    ):
        list(pool.map(lambda guest: guest.get(port, "/"), guests))

    errors = [error for guest in guests for error in guest.errors]
    assert errors == [], f"{len(errors)} errors, first ones: {errors[:5]}\n{log.read_text()}"
    assert [status for guest in guests for status in guest.statuses] == [200] * GREEN_REQUESTS
    assert whos_online.online_counts().guests == GREEN_REQUESTS
    assert hits_counted() == GREEN_REQUESTS
    assert "Traceback" not in log.read_text()
