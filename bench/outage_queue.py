"""What an outage costs a process that goes on serving: the throttle cookies it hands out, and
the memory its queue of visits takes.

Each measure runs in a Python process of its own on the test site (``tests.settings``), nothing
listening on the Redis port, each request a page of a new guest through Django's WSGI handler:
requests in a row with ``FAILURE_BACKOFF`` 2, counting those answered with a throttle cookie; and
as many requests as the queue holds once a flush has failed (a back-off of an hour, so that no
flush takes it), with the memory the process holds more (``tracemalloc``), the queue's part, and
the growth of its resident set, per visit.
"""

from __future__ import annotations

import functools
import gc
import io
import json
import logging
import os
import socket
import subprocess
import sys
import time
import tracemalloc
from dataclasses import dataclass
from pathlib import Path  # noqa: TC003 (the options' types are read at run time)
from typing import Any

from bench.harness import servers
from bench.harness.clients import address
from bench.harness.report import Section, table


@dataclass(frozen=True)
class Options:
    #: Requests of the cookies' run, and visits queued in the memory's.
    requests: int = 30_000
    queued: int = 20_000
    #: Another checkout measured the same way.
    against: Path | None = None


QUICK = Options(requests=2_000, queued=1_000)


def child(mode: str, requests: int, checkout: str) -> dict[str, Any]:
    """The measure, in the child process: whos_online from ``checkout``, Redis down."""
    sys.path.insert(0, checkout)
    import django
    from django.conf import settings

    with socket.socket() as sock:  # a port where nothing listens once it is closed
        sock.bind(("127.0.0.1", 0))
        url = f"redis://127.0.0.1:{sock.getsockname()[1]}/0"
    backoff = 2 if mode == "cookies" else 3600  # the memory's: one failure, then no flush
    settings.WHOS_ONLINE = {"REDIS_URL": url, "FAILURE_BACKOFF": backoff, "SNAPSHOT_MAX_AGE": 0}
    django.setup()
    logging.disable(logging.CRITICAL)  # the outage's warnings
    return cookies(requests) if mode == "cookies" else memory(requests)


def page(number: int) -> bool:
    """A page to a new guest, called as a server calls Django (its test client keeps a little
    of each request): whether it was answered with a throttle cookie."""
    from bench.internals import COOKIE_NAME

    environ = {
        "REQUEST_METHOD": "GET", "PATH_INFO": "/plain/", "REMOTE_ADDR": address(number),
        "SERVER_NAME": "testserver", "SERVER_PORT": "80", "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(), "wsgi.errors": sys.stderr,
    }  # fmt: skip
    headers: list[tuple[str, str]] = []
    start = lambda status, sent, *rest: headers.extend(sent)  # noqa: E731
    application()(environ, start).close()
    cookies = [value for name, value in headers if name == "Set-Cookie"]
    return any(value.startswith(f"{COOKIE_NAME}=") for value in cookies)


@functools.cache
def application() -> Any:
    """Django's WSGI handler, made once as a server makes it."""
    from django.core.handlers.wsgi import WSGIHandler

    return WSGIHandler()


def cookies(requests: int) -> dict[str, Any]:
    """Which requests in a row were answered with a throttle cookie, and when."""
    started = time.monotonic()
    times = [time.monotonic() - started for number in range(requests) if page(number)]
    return {"cookies": len(times), "first": (times or [0])[0], "last": (times or [0])[-1]}


def memory(requests: int) -> dict[str, Any]:
    """What ``requests`` visits queued after a failed flush hold: in all (``tracemalloc``),
    in the queue alone, and in the resident set."""
    import whos_online
    from bench import internals as whos

    page(0)  # what the first request loads and keeps, before measuring
    assert not whos_online.flush()  # the failure: the breaker is open from now on
    gc.collect()
    tracemalloc.start()
    before, rss = tracemalloc.get_traced_memory()[0], servers.rss(os.getpid())
    for number in range(1, requests + 1):
        page(number)
    gc.collect()
    held, grown = tracemalloc.get_traced_memory()[0] - before, servers.rss(os.getpid()) - rss
    queued = len(whos.flusher.current().queue.take())  # what the queue alone held goes with it
    gc.collect()
    queue = held - (tracemalloc.get_traced_memory()[0] - before)
    return {"queued": queued, "held": held, "queue": queue, "grown": grown}


def measure(checkout: Path, mode: str, requests: int) -> dict[str, Any]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(servers.ROOT),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }
    command = [sys.executable, "-m", "bench.outage_queue", mode, str(requests), str(checkout)]
    done = subprocess.run(
        command, cwd=checkout, env=env, capture_output=True, text=True, timeout=3600, check=True
    )
    return dict(json.loads(done.stdout))


def row(name: str, checkout: Path, options: Options) -> list[object]:
    got = measure(checkout, "cookies", options.requests)
    times = f", the first {got['first']:.3f} s in, the last {got['last']:.3f} s in"
    mem = measure(checkout, "memory", options.queued)
    held = [
        f"{mem[k] / 2**20:.1f} MiB ({mem[k] / mem['queued']:.0f} B a visit)"
        for k in ("held", "queue", "grown")
    ]
    return [
        name,
        f"{got['cookies']} of {options.requests}{times if got['cookies'] else ''}",
        mem["queued"],
        *held,
    ]


def run(options: Options) -> Section:
    rows = [
        row(name, checkout, options)
        for name, checkout in servers.checkouts(options.against).items()
    ]
    return Section(
        "An outage, to a process that goes on serving",
        f"Redis down; {options.requests} requests in a row from new guests (`FAILURE_BACKOFF` 2), "
        f"then {options.queued} visits queued by as many requests after a failed flush.",
        [
            table(
                "checkout | requests answered with a throttle cookie | visits queued | the "
                "process holds more (tracemalloc) | of which the queue | resident set grown",
                rows,
            )
        ],
    )


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1], int(sys.argv[2]), sys.argv[3])))
