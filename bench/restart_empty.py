"""How long visitors stay missing after Redis restarts without its data.

Run from the repository root: ``python3 scripts/dev.py bench restart_empty``.

The test site (``tests.load_settings``: the default ``THROTTLE``, ``SNAPSHOT_MAX_AGE`` and
``FLUSH_INTERVAL``) runs under gunicorn, two sync workers, on a redis-server that saves nothing.
``--guests`` browsers, each keeping its cookies, open a page with ``{% whos_online %}`` every
second. Once all of them are online, Redis is killed (SIGKILL) and started again, empty, on the
same port; the time until Redis holds every guest again is the figure. Their throttle cookies are
all fresh then: without a way to notice the loss, each would stay missing until their cookie ran
out (``THROTTLE``, 120 s). ``--against CHECKOUT`` runs another checkout of the project (say a
``git archive`` of an older commit) the same way, interleaved, and prints the ratio.
"""

from __future__ import annotations

import argparse
import http.client
import os
import subprocess
import sys
import tempfile
import threading
import time
from http.cookies import SimpleCookie
from pathlib import Path

import redis

from bench import stats
from tests.support import wsgi_server
from tests.support.redis_server import RedisServer

ROOT = Path(__file__).resolve().parent.parent
PREPARE = "import django; django.setup(); from django.core.management import call_command; "
PREPARE += "call_command('migrate', verbosity=0)"


class Browser:
    """A guest at its own address who keeps its cookies and opens a page every second."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.cookies: dict[str, str] = {}

    def visit(self, port: int) -> None:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
        headers = {"X-Forwarded-For": self.address, "Sec-Fetch-Dest": "document"}
        if self.cookies:
            headers["Cookie"] = "; ".join(f"{name}={value}" for name, value in self.cookies.items())
        try:
            connection.request("GET", "/", headers=headers)
            response = connection.getresponse()
            response.read()
            for header in response.headers.get_all("Set-Cookie") or []:
                for name, morsel in SimpleCookie(header).items():
                    self.cookies[name] = morsel.value
        finally:
            connection.close()

    def browse(self, port: int, stop: threading.Event) -> None:
        while not stop.wait(1.0):
            self.visit(port)


def guests_stored(server: RedisServer) -> int:
    client = redis.Redis(port=server.port)
    try:
        return int(client.zcard("{whos_online}:guests"))
    except redis.RedisError:
        return 0
    finally:
        client.close()


def wait_for(server: RedisServer, count: int, limit: float) -> float:
    """Seconds until Redis holds ``count`` guests (``limit`` if it never does)."""
    started = time.monotonic()
    while guests_stored(server) < count:
        if time.monotonic() - started > limit:
            return limit
        time.sleep(0.05)
    return time.monotonic() - started


def one_run(guests: int, limit: float, directory: Path, checkout: Path) -> float:
    server = RedisServer()
    server.start()
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.load_settings",
        "REDIS_URL": server.url,
        "WHOS_ONLINE_LOAD_DB": str(directory / "site.sqlite3"),
        "PYTHONPATH": str(checkout),
    }
    subprocess.run([sys.executable, "-c", PREPARE], cwd=checkout, env=env, check=True, timeout=120)
    browsers = [Browser(f"198.18.0.{number + 1}") for number in range(guests)]
    stop = threading.Event()
    try:
        with wsgi_server.gunicorn(
            env,
            directory / "gunicorn.log",
            ready_path="/static/app.css",
            workers=2,
            checkout=checkout,
        ) as (port, _process):
            threads = [
                threading.Thread(target=browser.browse, args=(port, stop)) for browser in browsers
            ]
            for thread in threads:
                thread.start()
            if wait_for(server, guests, limit) >= limit:
                msg = "the guests were never all online"
                raise RuntimeError(msg)
            time.sleep(2)  # every cookie fresh, every process's kept snapshot counting them
            assert server.process is not None
            server.process.kill()
            server.process.wait(timeout=10)
            server.start()  # the same port, no data
            took = wait_for(server, guests, limit)
            stop.set()
            for thread in threads:
                thread.join(30)
            return took
    finally:
        stop.set()
        server.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--guests", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--limit", type=float, default=150.0, help="seconds to wait at most")
    parser.add_argument(
        "--against",
        type=Path,
        metavar="CHECKOUT",
        help="also run this other checkout of the project, interleaved",
    )
    arguments = parser.parse_args(argv)
    checkouts = {"this checkout": ROOT}
    if arguments.against is not None:
        checkouts[str(arguments.against)] = arguments.against.resolve()
    found: dict[str, list[float]] = {name: [] for name in checkouts}
    for repeat in range(arguments.repeats):
        for name in stats.rotated(list(checkouts), repeat):
            with tempfile.TemporaryDirectory() as directory:
                took = one_run(arguments.guests, arguments.limit, Path(directory), checkouts[name])
            print(f"run {repeat + 1}, {name}: every guest back in Redis {took:.2f} s after")
            found[name].append(took)
    print(f"\n{arguments.guests} guests browsing every second, Redis restarted empty:")
    for name, values in found.items():
        spread = stats.Spread.of(values)
        print(f"- {name}: all back after {spread.show(lambda value: f'{value:.2f} s')}")
    if arguments.against is not None:
        ratio = stats.ratios(found[str(arguments.against)], found["this checkout"])
        print(f"- {arguments.against} takes {ratio.show(lambda value: f'{value:.1f}×')} as long")
    return 0


if __name__ == "__main__":
    sys.exit(main())
