"""Live streams under a real uvicorn, on raw sockets: a client that stops reading is ended at the
send bound and costs its worker no memory meanwhile; SIGTERM ends 30 open and 5 stalled streams at
once, with one worker and with two; under a limit of 160 open files, 220 stream attempts from one
client leave every page served and the log short; ``HEAD`` opens no stream and a request
pipelined behind it is answered.

The site is the load test's (tests/load_settings.py, the real redis-server, one trusted proxy), its
streams' bounds shortened by ``tests.support.stream_server``. Changes come from this process: a
guest written straight into Redis and announced on the channel every 20 ms, each a new state of
every stream."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import struct
import subprocess
import threading
import time
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlencode

import django
import pytest
import redis

from tests.support import wsgi_server
from tests.test_stream import site_widget
from whos_online.live.widget import WidgetOptions

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = [pytest.mark.slow, pytest.mark.parametrize("backend", ["real"], indirect=True)]

ROOT = Path(__file__).resolve().parent.parent
#: Seconds a send may wait, in the served site (a deployment's is 30).
SEND_BOUND = 2
#: Seconds the tests wait at most for what should come at once.
WAIT = 10.0
#: What uvicorn logs for each stream whose task whos_online cancelled. Up to Django 6.0 the
#: handler sends a response from a task of its own, takes its cancellation for a client gone and
#: returns: uvicorn logs that the response was cut. Django 6.1 sends it from the application's
#: own task, whose cancellation reaches the server, which logs it as an exception
#: (docs/live.md says so).
CUT_IN_ITS_OWN_TASK = django.VERSION < (6, 1)
CUT_UNFINISHED = "ASGI callable returned without completing response."
CUT = CUT_UNFINISHED if CUT_IN_ITS_OWN_TASK else "Exception in ASGI application"


def serve(
    real_redis_url: str, tmp_path: Path, served_by: str = "application", **options: object
) -> contextlib.AbstractContextManager[tuple[int, subprocess.Popen[bytes]]]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "tests.load_settings",
        "REDIS_URL": real_redis_url,
        "WHOS_ONLINE_LOAD_DB": str(tmp_path / "site.sqlite3"),
        "WHOS_ONLINE_TEST_SEND_BOUND": str(SEND_BOUND),
        "PYTHONPATH": str(ROOT),
    }
    return wsgi_server.uvicorn(
        env,
        tmp_path / "uvicorn.log",
        ready_path="/static/app.css",
        factory=f"tests.support.stream_server:{served_by}",
        **options,  # type: ignore [arg-type]
    )


def stream_path(widgets: int = 1) -> str:
    """The stream of ``widgets`` different site widgets (32 make a state of about 20 KB)."""
    queries = [site_widget()] + [
        WidgetOptions(peak=False, visitors=False, refresh=31 + number).query(None)
        for number in range(widgets - 1)
    ]
    return "/online/stream/?" + urlencode([("widget", query) for query in queries])


def request(port: int, path: str, address: str, *, receive_buffer: int = 0) -> socket.socket:
    connection = socket.socket()
    if receive_buffer:
        connection.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    connection.connect(("127.0.0.1", port))
    connection.sendall(
        f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-For: {address}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    return connection


def stalled(port: int, path: str, count: int) -> list[socket.socket]:
    """Streams whose client reads nothing, with as small a window as Linux gives."""
    return [request(port, path, f"198.18.9.{n + 1}", receive_buffer=4096) for n in range(count)]


def send_queues(port: int) -> list[int]:
    """Bytes the server's side of each connection to ``port`` holds unsent (Linux's table)."""
    found = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        if int(fields[1].rpartition(":")[2], 16) == port and fields[3] != "0A":
            found.append(int(fields[4].partition(":")[0], 16))
    return found


def rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS for {pid}")


@contextlib.contextmanager
def changing(real_redis_url: str) -> Iterator[None]:
    """A new guest, announced, every 20 ms while the block runs."""
    client = redis.Redis.from_url(real_redis_url)
    done = threading.Event()

    def change() -> None:
        number = 0
        while not done.wait(0.02):
            number += 1
            client.zadd("{whos_online}:guests", {f"guest-{number}": time.time()})
            client.publish("{whos_online}:changes", json.dumps({"all": True}))

    thread = threading.Thread(target=change)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
        client.close()


class Readers:
    """A thread that reads every byte the ``connections`` receive, until each ends."""

    def __init__(self, connections: list[socket.socket]) -> None:
        self.received = dict.fromkeys(connections, b"")
        self.ended: set[socket.socket] = set()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._read)
        self._thread.start()

    def _read(self) -> None:
        selector = selectors.DefaultSelector()
        for connection in self.received:
            connection.setblocking(False)
            selector.register(connection, selectors.EVENT_READ)
        while not self._done.is_set() and len(self.ended) < len(self.received):
            for key, _ in selector.select(0.1):
                ready = key.fileobj
                assert isinstance(ready, socket.socket)
                with contextlib.suppress(BlockingIOError):
                    chunk = ready.recv(1 << 16)
                    self.received[ready] += chunk
                    if not chunk:
                        selector.unregister(ready)
                        self.ended.add(ready)

    def stop(self) -> None:
        self._done.set()
        self._thread.join()


def until_full(port: int, timeout: float = 60) -> None:
    """Until what the server holds unsent for its connections stops growing (each is full)."""
    deadline = time.monotonic() + timeout
    last: list[int] = []
    while time.monotonic() < deadline:
        time.sleep(1)
        queues = send_queues(port)
        if queues == last and min(queues, default=0) > 100_000:
            return
        last = queues
    raise AssertionError(f"the send queues never filled: {last}")


def drained_to_the_end(connection: socket.socket) -> bool:
    """Read what the server had buffered; whether the response then ended (the connection
    closed) rather than going on."""
    connection.settimeout(WAIT)
    with contextlib.suppress(TimeoutError):
        while connection.recv(1 << 20):
            pass
        return True
    return False


def reset(connection: socket.socket) -> None:
    """Close with a reset, as a client that crashed or a proxy that gave up."""
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    connection.close()


def stopped_within(process: subprocess.Popen[bytes], timeout: float) -> bool:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


@pytest.mark.parametrize("served_by", ["application", "live_streams"])
def test_a_client_that_stops_reading_ends_at_the_bound_and_costs_no_memory(
    r, real_redis_url, tmp_path, served_by
):
    """Six clients stop reading a stream of 32 widgets that changes 50 times a second. Once the
    kernel holds all it takes for them, the worker's memory stays flat (each stream holds one
    state), each stream is ended once a send has waited ``SEND_BOUND`` seconds, and a client
    that reads again finds the response over once it has taken what was buffered. Those that
    then reset their connection leave nothing that holds the worker at SIGTERM (as a stream
    that ran on after its client went did: uvicorn waited "for background tasks" for ever)."""
    log = tmp_path / "uvicorn.log"
    with serve(real_redis_url, tmp_path, served_by, log_level="info") as (port, process):
        clients = stalled(port, stream_path(32), 6)
        with changing(real_redis_url):
            until_full(port)
            before = rss(process.pid)
            time.sleep(SEND_BOUND + 2)  # the bound, and the tick that ends the streams
            grown = rss(process.pid) - before
        ended = [drained_to_the_end(connection) for connection in clients[:3]]
        for connection in clients[3:]:
            reset(connection)
        stopped = stopped_within(process, WAIT)

    text = log.read_text()
    assert grown < 4 * 1024 * 1024, f"the worker grew by {grown / 1024 / 1024:.1f} MiB"
    # ``LiveStreams`` leaves a response it cut unfinished, whatever Django's version.
    in_its_own_task = CUT_IN_ITS_OWN_TASK or served_by == "live_streams"
    assert text.count(CUT_UNFINISHED if in_its_own_task else CUT) == 6
    assert ended == [True] * 3
    assert stopped
    assert "Waiting for background tasks" not in text
    assert text.count("Traceback") == (0 if in_its_own_task else 6)


@pytest.mark.parametrize(
    ("workers", "served_by"), [(1, "application"), (2, "application"), (2, "live_streams")]
)
def test_sigterm_ends_thirty_open_and_five_stalled_streams_at_once(
    r, real_redis_url, tmp_path, workers, served_by
):
    """A stream lasts up to ``ROOM_TOKEN_MAX_AGE`` (an hour), and uvicorn waits for the
    responses under way before it exits: at SIGTERM, each stream is sent its end, and its
    response ends, those whose client has stopped reading included."""
    log = tmp_path / "uvicorn.log"
    with serve(real_redis_url, tmp_path, served_by, workers=workers) as (port, process):
        reading = [request(port, stream_path(), f"198.18.8.{n + 1}") for n in range(30)]
        readers = Readers(reading)
        not_reading = stalled(port, stream_path(), 5)
        with changing(real_redis_url):
            time.sleep(2)
            stopped = stopped_within(process, WAIT)
        readers.stop()
        for connection in [*reading, *not_reading]:
            connection.close()

    assert stopped
    assert len(readers.ended) == 30  # every response ended…
    ends = [received.count(b"event: end") for received in readers.received.values()]
    assert ends == [1] * 30  # …after its end
    assert "Traceback" not in log.read_text()


def test_under_160_open_files_220_stream_attempts_leave_pages_served(r, real_redis_url, tmp_path):
    """One client (one address, no session) tries 220 streams, ten at a time, each kept open
    if opened. Past its cap (64 per address) the view answers 503 and closes the connection:
    the worker keeps files for its pages, every page is served, and the log says it once (it
    used to grow by millions of lines of ``accept() out of system resource``)."""
    log = tmp_path / "uvicorn.log"
    with serve(real_redis_url, tmp_path, open_files=160) as (port, _process):
        opened: list[socket.socket] = []
        statuses: Counter[int] = Counter()
        pages = []
        for batch in range(22):
            attempts = [request(port, stream_path(), "198.18.7.1") for _ in range(10)]
            for connection in attempts:
                connection.settimeout(WAIT)
                status = int(connection.recv(1024).split(b" ", 2)[1])
                statuses[status] += 1
                if status == 200:
                    opened.append(connection)
                else:
                    connection.close()
            pages.append(page(port, f"198.18.6.{batch + 1}"))
        for connection in opened:
            connection.close()

    assert statuses == {200: 64, 503: 156}
    assert pages == [200] * 22
    assert log.stat().st_size < 1024 * 1024
    assert log.read_text().count("whos_online refuses live streams") == 1


def page(port: int, address: str) -> int:
    with socket.create_connection(("127.0.0.1", port), timeout=WAIT) as connection:
        connection.sendall(
            f"GET /plain/ HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Forwarded-For: {address}\r\n"
            "Connection: close\r\n\r\n".encode()
        )
        return int(connection.recv(1024).split(b" ", 2)[1])


def test_head_opens_no_stream_and_the_connection_goes_on_at_once(r, real_redis_url, tmp_path):
    """A proxy's pool sends requests one after the other on one connection: a ``HEAD`` of the
    stream is answered (405, its headers only) and the request behind it too."""
    with (
        serve(real_redis_url, tmp_path) as (port, _process),
        socket.create_connection(("127.0.0.1", port), timeout=WAIT) as connection,
    ):
        connection.sendall(
            f"HEAD {stream_path()} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
            "GET /static/app.css HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
        )
        received = b""
        with contextlib.suppress(TimeoutError):
            while chunk := connection.recv(1 << 16):
                received += chunk

    heads = [line for line in received.split(b"\r\n") if line.startswith(b"HTTP/1.1 ")]
    assert heads == [b"HTTP/1.1 405 Method Not Allowed", b"HTTP/1.1 200 OK"]
    assert b"\r\nallow: get\r\n" in received.lower()
