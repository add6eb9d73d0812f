"""A real redis-server killed (SIGKILL) and started again on the same port while a real server of
the test site idles: uvicorn (ASGI, where visits are written with redis-py's asyncio clients)
and gunicorn (WSGI, its sync clients).

Each pool holds several connections to the old process when it dies. A pool that hands them out
one by one after the restart fails one call after another, each opening the circuit breaker
anew: a warning and ``FAILURE_BACKOFF`` seconds without recording each time. The site must
instead lose at most one call (one warning), and record every visit from the next one on.
"""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis

from tests.support import wsgi_server
from tests.support.redis_server import RedisServer, running

if TYPE_CHECKING:
    from collections.abc import Iterator

ROOT = Path(__file__).resolve().parents[2]
#: Concurrent clients before the restart: enough for the pool to hold that many connections.
CONCURRENT = 12
#: Seconds between the kill and the new server's start, and the server idles after it.
DOWN_FOR, IDLE_AFTER = 0.2, 1.0
#: Rounds of concurrent visits after the restart, each by new guests.
ROUNDS_AFTER = 5
#: How the uvicorn and gunicorn workers log whos_online's warnings (tests/load_settings.py).
WARNING = re.compile(r"Redis at \S+ is unavailable")

pytestmark = [
    pytest.mark.load,
    pytest.mark.skipif(sys.platform == "win32", reason="gunicorn runs on Unix only"),
]


def restart(server: RedisServer) -> float:
    """SIGKILL, then a new, empty server on the same port ``DOWN_FOR`` seconds later; returns
    the seconds the restart took."""
    started = time.monotonic()
    assert server.process is not None
    server.process.kill()
    server.process.wait(timeout=5)
    time.sleep(DOWN_FOR)
    server.start()
    return time.monotonic() - started


def visit(port: int, address: str, path: str) -> int:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=15)
    try:
        connection.request("GET", path, headers={"X-Forwarded-For": address})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def concurrent_visits(port: int, addresses: list[str], path: str) -> list[int]:
    """Each address visits once, all at the same time."""
    statuses: list[int] = []
    barrier = threading.Barrier(len(addresses))

    def one(address: str) -> None:
        barrier.wait()
        statuses.append(visit(port, address, path))

    threads = [threading.Thread(target=one, args=(address,)) for address in addresses]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return statuses


def guests_stored(server: RedisServer) -> int:
    client = redis.Redis(port=server.port)
    try:
        return int(client.zcard("{whos_online}:guests"))
    finally:
        client.close()


def stored_soon(server: RedisServer, expected: int, wait: float = 5) -> int:
    """The guests stored once the site's flush had time to write ``expected`` of them (it holds
    visits up to FLUSH_INTERVAL): the count then, or after ``wait`` seconds if it never gets
    there."""
    deadline = time.monotonic() + wait
    while (found := guests_stored(server)) < expected and time.monotonic() < deadline:
        time.sleep(0.02)
    return found


@contextlib.contextmanager
def site(kind: str, server: RedisServer, tmp_path: Path) -> Iterator[tuple[int, Path]]:
    """The test site on ``kind`` ("uvicorn" or "gunicorn"), one worker process, on ``server``.

    gunicorn's worker has a thread per concurrent client (gthread), so that its sync pool holds
    as many connections as uvicorn's asyncio pool does."""
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.load_settings",
        "REDIS_URL": server.url,
        "WHOS_ONLINE_LOAD_DB": str(tmp_path / "restart.sqlite3"),
        "PYTHONPATH": str(ROOT),
    }
    prepare = "import django; django.setup(); from django.core.management import call_command; "
    prepare += "call_command('migrate', verbosity=0)"
    subprocess.run([sys.executable, "-c", prepare], cwd=ROOT, env=env, check=True, timeout=120)
    log = tmp_path / f"{kind}.log"
    ready = "/static/app.css"  # ignored by the middleware: waiting for it records nobody
    if kind == "uvicorn":
        serving = wsgi_server.uvicorn(env, log, ready_path=ready, workers=1)
    else:
        serving = wsgi_server.gunicorn(env, log, ready_path=ready, workers=1, threads=CONCURRENT)
    try:
        with serving as (port, _process):
            yield port, log
    except wsgi_server.GunicornError as error:
        pytest.fail(str(error))


@pytest.mark.parametrize("kind", ["uvicorn", "gunicorn"])
def test_a_redis_restart_costs_at_most_one_warning_and_recording_resumes(tmp_path, kind):
    with running() as server, site(kind, server, tmp_path) as (port, log):
        before = [f"198.18.1.{n}" for n in range(1, CONCURRENT + 1)]
        assert concurrent_visits(port, before, "/plain/") == [200] * CONCURRENT
        assert stored_soon(server, CONCURRENT) == CONCURRENT

        took = restart(server)
        time.sleep(IDLE_AFTER)  # the site idles; its pool still holds the dead connections
        assert guests_stored(server) == 0  # a new, empty process

        started = time.monotonic()
        recorded = []
        for round_number in range(ROUNDS_AFTER):
            addresses = [f"198.18.{round_number + 2}.{n}" for n in range(1, CONCURRENT + 1)]
            assert concurrent_visits(port, addresses, "/plain/") == [200] * CONCURRENT
            recorded.append(stored_soon(server, CONCURRENT * (round_number + 1)))
        elapsed = time.monotonic() - started
        warnings = WARNING.findall(log.read_text())
        # Past a back-off (FAILURE_BACKOFF, 10 s) the queue has written everything it held.
        settled = stored_soon(server, CONCURRENT * ROUNDS_AFTER, wait=15)

    print(
        f"\n{kind}: restart in {took:.2f} s; after it, {ROUNDS_AFTER} rounds of {CONCURRENT} "
        f"visits in {elapsed:.2f} s; guests stored after each round: {recorded}; "
        f"{len(warnings)} warning(s)"
    )
    assert len(warnings) <= 1
    expected = [CONCURRENT * (n + 1) for n in range(ROUNDS_AFTER)]
    if not warnings:
        assert recorded == expected
    else:
        # The one call that met a dead connection opened the breaker: its visits, and those the
        # rounds of its back-off queued, wait in the queue and are written after it. Rounds are
        # stored late then, none lost.
        assert all(stored <= due for stored, due in zip(recorded, expected, strict=True))
    assert settled == expected[-1]
