"""How long visitors stay missing after Redis restarts without its data: the test site
(``tests.load_settings``, the default ``THROTTLE`` of 120 s) under gunicorn, ``guests`` browsers
keeping their cookies and opening a page with ``{% whos_online %}`` every second; once all are
online, Redis is killed and started again, empty, on its port: the time until it holds every
guest again. With ``--against``, another checkout the same way, interleaved.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import redis

from bench.harness import servers
from bench.harness.clients import Browser, crowd
from bench.harness.report import Section, fixed, table
from bench.harness.rounds import interleaved, ratios, spread
from tests.support import wsgi_server

seconds = fixed(2)


@dataclass(frozen=True)
class Options:
    guests: int = 20
    repeats: int = 3
    #: Seconds to wait at most for the guests to be back.
    limit: float = 150.0
    #: Another checkout run the same way, interleaved.
    against: Path | None = None


QUICK = Options(guests=3, repeats=1, limit=30.0)


def until_all(server: servers.RedisServer, count: int, limit: float) -> float:
    """Seconds until Redis holds ``count`` guests (``limit`` if it never does)."""
    started = time.monotonic()
    while time.monotonic() - started < limit:
        try:
            if redis.Redis(port=server.port).zcard("{whos_online}:guests") >= count:
                break
        except redis.RedisError:
            pass
        time.sleep(0.05)
    return time.monotonic() - started


def one_run(checkout: Path, options: Options) -> float:
    with servers.temporary_directory() as workdir, servers.redis_server() as server:
        env = {
            **os.environ,
            "DJANGO_SETTINGS_MODULE": "tests.load_settings",
            "REDIS_URL": server.url,
            "PYTHONPATH": str(checkout),
        }
        env["WHOS_ONLINE_LOAD_DB"] = f"{workdir}/site.sqlite3"
        servers.python(env, servers.MIGRATE, cwd=checkout)
        log, stop = Path(workdir) / "gunicorn.log", threading.Event()
        serving = wsgi_server.gunicorn(env, log, ready_path="/static/app.css", checkout=checkout)
        with serving as (port, _):

            def browsing(browser: Browser) -> None:
                while not stop.wait(1.0):
                    browser.visit(port)

            threads = [threading.Thread(target=browsing, args=(b,)) for b in crowd(options.guests)]
            for thread in threads:
                thread.start()
            try:
                if until_all(server, options.guests, options.limit) >= options.limit:
                    raise RuntimeError("the guests were never all online")
                time.sleep(2)  # every cookie fresh, every process's snapshot counting them
                assert server.process is not None
                server.process.kill()
                server.process.wait(timeout=10)
                server.start()  # the same port, no data
                return until_all(server, options.guests, options.limit)
            finally:
                stop.set()
                for thread in threads:
                    thread.join(30)


def run(options: Options) -> Section:
    checkouts = servers.checkouts(options.against)
    found = interleaved(
        list(checkouts),
        options.repeats,
        lambda name: one_run(checkouts[name], options),
        label="restart",
    )
    rows = [[name, len(took), spread(took, seconds)] for name, took in found.items()]
    notes = (
        []
        if not options.against
        else [
            f"{options.against} takes "
            f"{ratios(found[str(options.against)], found['this checkout']).show(seconds)} × as "
            "long."
        ]
    )
    return Section(
        "Redis restarted empty",
        f"{options.guests} guests browsing every second, Redis killed and started again empty; "
        f"seconds until every guest is back in Redis (at most {options.limit:g}), median "
        "(min–max).",
        [table("checkout | runs | every guest back after, s", rows)],
        notes=notes,
    )
