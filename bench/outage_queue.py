"""What an outage costs a process that goes on serving: the throttle cookies it hands out, and the
memory its queue of visits takes.

Run from the repository root: ``python3 scripts/dev.py bench outage_queue`` (``--against
CHECKOUT`` measures another checkout of the project the same way, say a ``git worktree`` of an
older commit).

Each measurement runs in a Python process of its own, on the test site (``tests.settings``) with
nothing listening on the Redis port and the default ``FLUSH_INTERVAL``; every request is a page
from a new guest, handed to Django's WSGI handler as a server would:

* cookies: ``--requests`` requests in a row, with ``FAILURE_BACKOFF`` 2, counting those answered
  with a throttle cookie, and when the first and the last of them came. While Redis is known to
  be down none is handed out: only the requests recorded before the process's first flush failed
  get one.
* memory: as many requests as the queue holds (``QUEUE_SIZE``, 20 000), each leaving its visit
  in the queue once a flush has failed (with a back-off of an hour, so that no flush takes the
  queue while it is measured): what the process holds more afterwards, by
  ``tracemalloc`` (after a collection; the queue, and the caches of guests' pseudonyms, which are
  bounded), what of it goes when the queue is emptied, and the growth of the process's resident
  set (``VmRSS``, which also keeps what the requests' garbage took at its highest), per visit.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: Run in the measuring process, from the root of the checkout measured; only the public surface
#: of whos_online is used, so that an older checkout runs it too.
CHILD = """
import gc, socket, sys, time, tracemalloc
import django
from django.conf import settings

with socket.socket() as sock:  # a port where nothing listens once it is closed
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
mode, requests = sys.argv[1], int(sys.argv[2])
settings.WHOS_ONLINE = {
    "REDIS_URL": f"redis://127.0.0.1:{port}/0",
    # Measuring the queue, no flush must take it meanwhile: one failure, then none for an hour.
    "FAILURE_BACKOFF": 2 if mode == "cookies" else 3600,
    "SNAPSHOT_MAX_AGE": 0,
}
django.setup()
import whos_online
import io
import logging
logging.disable(logging.CRITICAL)  # the outage's warnings
from django.core.handlers.wsgi import WSGIHandler

# Called as a WSGI server calls it: Django's test client keeps a little of each request for ever,
# which would be counted too.
application = WSGIHandler()


def page(number):  # a page to a new guest: whether it was answered with a throttle cookie
    address = f"10.{number >> 16 & 255}.{number >> 8 & 255}.{number & 255}"
    environ = {
        "REQUEST_METHOD": "GET", "PATH_INFO": "/plain/", "REMOTE_ADDR": address,
        "SERVER_NAME": "testserver", "SERVER_PORT": "80", "wsgi.url_scheme": "http",
        "wsgi.input": io.BytesIO(b""), "wsgi.errors": sys.stderr,
    }
    headers = []
    body = application(environ, lambda status, sent, *rest: headers.extend(sent))
    b"".join(body)
    body.close()
    cookies = [value.strip() for name, value in headers if name == "Set-Cookie"]
    return any(cookie.startswith("whos_online=") for cookie in cookies)


def rss():
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) * 1024 for line in status if line.startswith("VmRSS:"))


if mode == "cookies":
    started, times = time.monotonic(), []
    for number in range(requests):
        if page(number):
            times.append(time.monotonic() - started)
    print(len(times), times[0] if times else 0.0, times[-1] if times else 0.0)
else:
    try:
        from whos_online.flushing.flusher import flusher
    except ImportError:  # before the package was laid out in subpackages: one flusher
        from whos_online.flushing import flusher as made
        flusher = lambda: made
    page(0)  # what the first request loads and keeps, before measuring
    assert not whos_online.flush()  # the failure: the breaker is open from now on
    gc.collect()
    tracemalloc.start()
    before, rss_before = tracemalloc.get_traced_memory()[0], rss()
    for number in range(1, requests + 1):
        page(number)
    gc.collect()
    held, grown = tracemalloc.get_traced_memory()[0] - before, rss() - rss_before
    queued = len(flusher().queue)
    flusher().queue.take()  # what the queue alone held goes with it
    gc.collect()
    print(queued, held, held - (tracemalloc.get_traced_memory()[0] - before), grown)
"""


def measure(checkout: Path, mode: str, requests: int) -> list[float]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "PYTHONPATH": str(checkout),
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }
    result = subprocess.run(
        [sys.executable, "-c", CHILD, mode, str(requests)],
        cwd=checkout,
        env=env,
        capture_output=True,
        text=True,
        timeout=3600,
        check=True,
    )
    return [float(value) for value in result.stdout.split()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=30_000, help="of the cookies' run")
    parser.add_argument("--queued", type=int, default=20_000, help="visits of the memory's run")
    parser.add_argument(
        "--against",
        type=Path,
        metavar="CHECKOUT",
        help="also measure this other checkout of the project",
    )
    arguments = parser.parse_args(argv)
    checkouts = {"this checkout": ROOT}
    if arguments.against is not None:
        checkouts[str(arguments.against)] = arguments.against.resolve()
    for name, checkout in checkouts.items():
        cookies, first, last = measure(checkout, "cookies", arguments.requests)
        print(
            f"{name}: {cookies:.0f} of {arguments.requests} requests got a throttle cookie"
            + (f", the first {first:.3f} s in, the last {last:.3f} s in" if cookies else "")
        )
        queued, held, queue, grown = measure(checkout, "memory", arguments.queued)
        print(
            f"{name}: {queued:.0f} visits queued by as many requests: the process holds "
            f"{held / 2**20:.1f} MiB more ({held / queued:.0f} B a visit, tracemalloc), the "
            f"queue itself {queue / 2**20:.1f} MiB ({queue / queued:.0f} B a visit); resident "
            f"set {grown / 2**20:+.1f} MiB ({grown / queued:.0f} B a visit)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
