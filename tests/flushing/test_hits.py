"""Page hits (``COUNT_HITS``): the in-process buffer, its flushes, and what reaches Redis."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import redis
from django.test import Client

import whos_online
from tests.conftest import SCRIPTS
from tests.support.delaying_proxy import DelayingProxy
from tests.support.helpers import GOOGLEBOT, configure
from tests.support.processes import in_a_fork
from whos_online import api
from whos_online.backend import clients
from whos_online.backend.clients import admin_client
from whos_online.config.settings import get_config
from whos_online.flushing import batches
from whos_online.flushing import flusher as flushing
from whos_online.recording import throttle
from whos_online.recording import visits as recording
from whos_online.store import counters

if TYPE_CHECKING:
    from collections.abc import Iterator


#: A Unix time that starts a slice at every default precision (a multiple of 432000 s).
T0 = 1_799_712_000
PRECISIONS = (1, 5, 60, 300, 3600, 18000, 86400)
ROOT = Path(__file__).resolve().parents[2]


def flusher_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == "whos_online flusher"]


def pending() -> bool:
    """Whether a flush is scheduled (a call, so that mypy does not narrow it between reads)."""
    return flushing.current().thread.deadline is not None


def total(precision: int) -> int:
    return sum(count for _, count in api.get_counter("hits", precision))


@pytest.fixture(autouse=True)
def _no_flush_mid_test(monkeypatch) -> None:
    """No background flush fires in the middle of a test: the flusher's thread waits an hour
    for the hits of a throttled request (FLUSH_INTERVAL is 0 in the test settings). The thread
    stops with the test, as settings are reset."""
    monkeypatch.setattr(batches, "LONGEST_WAIT", 3600)


@pytest.fixture
def counting(settings) -> None:
    configure(settings, COUNT_HITS=True)


# Through the middleware


def test_a_burst_of_requests_counts_every_hit_at_every_precision(backend, counting, alice):
    guest = Client(REMOTE_ADDR="203.0.113.7")
    other = Client(REMOTE_ADDR="198.51.100.2")
    bot = Client(REMOTE_ADDR="198.51.100.3", HTTP_USER_AGENT=GOOGLEBOT)
    user = Client(REMOTE_ADDR="198.51.100.4")
    started = int(time.time())

    counted = 0
    for client, path in [
        (guest, "/plain/"),  # recorded
        *[(guest, "/plain/")] * 4,  # throttled
        (other, "/"),  # recorded, renders the tag
        *[(other, "/plain/")] * 2,
        (bot, "/plain/"),
        (bot, "/plain/"),
        (user, "/login/alice/"),  # recorded at login, in the view
        *[(user, "/plain/")] * 3,
        (user, "/"),
    ]:
        assert client.get(path).status_code == 200
        counted += 1
    for client in (guest, user, bot):
        client.get("/static/app.css")
        client.get("/favicon.ico")
    ended = int(time.time())

    assert counted == 15
    # Each recorded visit carried what was buffered before it (its own hit included), and so
    # did each read of the site (a page with the tag: the process writes its queue first). Hits
    # are counted after the view: the last page's, read before it was counted, waits.
    assert total(1) == 14
    assert batches.buffer().total() == 1
    assert recording.flush_hits() is True
    assert batches.buffer().total() == 0
    for precision in PRECISIONS:
        assert total(precision) == 15, precision
    assert all(started <= second <= ended for second, _ in api.get_counter("hits", 1))


def test_throttled_requests_buffer_hits_and_a_recorded_one_carries_them(
    backend, counting, client, redis_calls
):
    client.get("/plain/")
    assert total(1) == 1
    assert batches.buffer().total() == 0
    redis_calls.clear()

    for _ in range(3):
        response = client.get("/plain/")
        assert throttle.COOKIE_NAME not in response.cookies
    client.get("/static/app.css")
    client.get("/favicon.ico")

    assert redis_calls.trips == []
    assert batches.buffer().total() == 3

    client.cookies.clear()
    response = client.get("/plain/", REMOTE_ADDR="198.51.100.1")

    assert throttle.COOKIE_NAME in response.cookies
    assert redis_calls.trips == [["EVALSHA"]]
    assert batches.buffer().total() == 0
    assert total(1) == 5
    assert total(86400) == 5


def test_custom_ignore_paths_are_not_counted(backend, settings, client):
    configure(settings, COUNT_HITS=True, IGNORE_PATHS=[r"^/plain/"])

    client.get("/plain/")
    client.get("/static/app.css")  # no longer ignored: the setting replaces the defaults

    assert batches.buffer().total() + total(1) == 1


def test_count_hits_off_counts_nothing(backend, r, client, redis_calls):
    client.get("/plain/")
    client.get("/plain/")
    client.cookies.clear()
    client.get("/", REMOTE_ADDR="198.51.100.1")

    assert batches.buffer().total() == 0
    assert pending() is False
    assert flusher_threads() == []
    assert r.keys("*hits*") == []
    assert [m for m in r.zrange("{whos_online}:counters", 0, -1) if b"hits" in m] == []
    redis_calls.clear()
    assert recording.flush_hits() is True
    assert redis_calls.trips == []


# Slices


def test_hits_land_in_the_slice_of_the_second_they_happened(backend, counting):
    for moment in (T0 - 0.5, T0, T0 + 0.999, T0 + 4.999, T0 + 5, T0 + 59.9, T0 + 60):
        recording.count_hit(moment)
    recording.count_hit(T0 + 299)
    recording.count_hit(datetime.fromtimestamp(T0 + 300, tz=timezone.utc))
    recording.count_hit(T0 + 3600.2)

    assert recording.flush_hits() is True

    assert api.get_counter("hits", 1) == [
        (T0 - 1, 1),
        (T0, 2),
        (T0 + 4, 1),
        (T0 + 5, 1),
        (T0 + 59, 1),
        (T0 + 60, 1),
        (T0 + 299, 1),
        (T0 + 300, 1),
        (T0 + 3600, 1),
    ]
    assert api.get_counter("hits", 5) == [
        (T0 - 5, 1),
        (T0, 3),
        (T0 + 5, 1),
        (T0 + 55, 1),
        (T0 + 60, 1),
        (T0 + 295, 1),
        (T0 + 300, 1),
        (T0 + 3600, 1),
    ]
    assert api.get_counter("hits", 60) == [
        (T0 - 60, 1),
        (T0, 5),
        (T0 + 60, 1),
        (T0 + 240, 1),
        (T0 + 300, 1),
        (T0 + 3600, 1),
    ]
    assert api.get_counter("hits", 300) == [(T0 - 300, 1), (T0, 7), (T0 + 300, 1), (T0 + 3600, 1)]
    assert api.get_counter("hits", 3600) == [(T0 - 3600, 1), (T0, 8), (T0 + 3600, 1)]
    assert api.get_counter("hits", 18000) == [(T0 - 18000, 1), (T0, 9)]
    assert api.get_counter("hits", 86400) == [(T0 - 86400, 1), (T0, 9)]


def test_hits_carried_by_a_visit_keep_their_own_seconds(backend, counting, redis_calls):
    recording.count_hit(T0 - 1)
    recording.count_hit(T0 + 1)
    recording.count_hit(T0 + 1)

    assert api.record_guest("192.0.2.1", now=T0 + 7) is True

    assert redis_calls.trips == [["EVALSHA"]]
    assert batches.buffer().total() == 0
    assert api.get_counter("hits", 1) == [(T0 - 1, 1), (T0 + 1, 2)]
    assert api.get_counter("hits", 5) == [(T0 - 5, 1), (T0, 2)]


# Redis down


def test_redis_down_keeps_the_hits_until_it_is_back(backend, counting, outage):
    recording.count_hit(T0)
    recording.count_hit(T0)
    recording.count_hit(T0 + 1)
    outage.begin()

    assert recording.flush_hits() is False
    assert batches.buffer().total() == 3
    # The flush is tried again later, by the flusher's thread.
    assert pending() is True
    recording.count_hit(T0 + 2)
    assert recording.flush_hits() is False  # within FAILURE_BACKOFF: Redis is not even tried
    assert batches.buffer().total() == 4

    outage.end()
    assert api.get_counter("hits", 1) == []
    assert recording.flush_hits() is True

    assert batches.buffer().total() == 0
    assert api.get_counter("hits", 1) == [(T0, 2), (T0 + 1, 1), (T0 + 2, 1)]
    assert api.get_counter("hits", 86400) == [(T0, 4)]


def test_a_failed_recorded_visit_gives_its_hits_back(backend, counting, client, outage):
    recording.count_hit(T0)
    recording.count_hit(T0 + 1)
    outage.begin()

    response = client.get("/plain/")
    assert response.status_code == 200
    assert throttle.COOKIE_NAME not in response.cookies
    assert api.record_guest("192.0.2.1") is False
    assert batches.buffer().total() == 3

    outage.end()
    assert recording.flush_hits() is True

    seconds = dict(api.get_counter("hits", 1))
    assert (seconds.pop(T0), seconds.pop(T0 + 1)) == (1, 1)
    assert list(seconds.values()) == [1]  # the hit of the failed request, at its own second
    assert total(1) == 3
    assert total(86400) == 3


def test_a_failed_batch_folds_seconds_beyond_max_buffered_seconds(monkeypatch):
    monkeypatch.setattr(batches, "MAX_BUFFERED_SECONDS", 3)
    buffer = batches.HitBuffer()
    for second in range(5):
        buffer.add(T0 + 100 + second)
    # Adding never folds: only a failed write does.
    batch = buffer.take()
    assert batch is not None
    assert batch.counts == {T0 + 100 + second: 1 for second in range(5)}

    buffer.add(T0 + 3, 4)
    buffer.add(T0 + 4.5)
    buffer.add(T0 + 5)
    buffer.add(T0 + 6)
    buffer.settle(batch, added=False)

    assert buffer.total() == 5 + 7
    again = buffer.take()
    assert again is batch  # the failed batch goes again, as it is, before anything newer
    assert again.counts == {T0 + 102: 3, T0 + 103: 1, T0 + 104: 1}
    buffer.settle(again, added=True)
    newer = buffer.take()
    assert newer is not None
    assert newer.number == batch.number + 1
    assert newer.counts == {T0 + 4: 5, T0 + 5: 1, T0 + 6: 1}
    buffer.settle(newer, added=True)
    assert buffer.take() is None


def test_a_long_outage_folds_the_oldest_seconds_and_keeps_the_total(
    backend, counting, outage, monkeypatch
):
    monkeypatch.setattr(batches, "MAX_BUFFERED_SECONDS", 3)
    for moment, count in [(T0, 1), (T0 + 1, 2), (T0 + 2, 1), (T0 + 3, 1), (T0 + 4, 1)]:
        for _ in range(count):
            recording.count_hit(moment)
    outage.begin()

    assert recording.flush_hits() is False
    assert batches.buffer().total() == 6

    outage.end()
    assert recording.flush_hits() is True
    assert api.get_counter("hits", 1) == [(T0 + 2, 4), (T0 + 3, 1), (T0 + 4, 1)]
    assert api.get_counter("hits", 5) == [(T0, 6)]


# Concurrency and the flusher


def test_concurrent_hits_are_all_counted(counting):
    barrier = threading.Barrier(8)

    def count() -> None:
        barrier.wait(5)
        for index in range(500):
            recording.count_hit(T0 + index % 3)

    threads = [threading.Thread(target=count) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(5)

    batch = batches.buffer().take()
    assert batch is not None
    assert batch.counts == {T0: 1336, T0 + 1: 1336, T0 + 2: 1328}
    assert len(flusher_threads()) == 1


def test_hits_alone_wait_longest_wait_and_ride_along_with_a_visit_s_flush(counting, settings):
    """Hits of throttled requests wait LONGEST_WAIT (a process that only counts hits writes at
    most once a second), whatever FLUSH_INTERVAL, unless it is longer; a visit queued meanwhile
    brings the flush forward to its FLUSH_INTERVAL, and the hits go with it."""
    assert batches.LONGEST_WAIT == 3600  # type: ignore [comparison-overlap] # as this module sets it
    for interval in (0, 0.25):
        configure(settings, COUNT_HITS=True, FLUSH_INTERVAL=interval)
        started = time.monotonic()
        recording.count_hit()
        deadline = flushing.current().thread.deadline
        assert deadline is not None
        assert deadline - started == pytest.approx(3600, abs=5)

    flushing.after_recording(get_config())  # what queueing a visit does
    deadline = flushing.current().thread.deadline
    assert deadline is not None
    assert deadline - started == pytest.approx(0.25, abs=0.2)


def test_count_hit_schedules_a_flush_that_writes_to_redis(backend, counting, monkeypatch):
    monkeypatch.setattr(batches, "LONGEST_WAIT", 0.05)
    flushed = threading.Event()
    original = flushing.current().flush

    def flush() -> frozenset[str]:
        try:
            return original()
        finally:
            flushed.set()

    monkeypatch.setattr(flushing.current(), "flush", flush)

    recording.count_hit(T0)
    recording.count_hit(T0)
    recording.count_hit(T0 + 1)
    assert pending() is True
    assert len(flusher_threads()) == 1

    assert flushed.wait(5)

    assert pending() is False
    assert batches.buffer().total() == 0
    assert api.get_counter("hits", 1) == [(T0, 2), (T0 + 1, 1)]
    assert api.get_counter("hits", 60) == [(T0, 3)]


# Processes


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_starts_with_an_empty_buffer(counting):
    recording.count_hit(T0)  # also leaves a flush pending in the parent
    batches.buffer().add(T0 + 1, 3)
    assert pending() is True

    def child() -> str:  # pragma: no cover - the child reports through the pipe
        before = batches.buffer().total()
        was_pending = pending()
        batches.buffer().add(T0 + 2)
        return f"{before} {was_pending} {batches.buffer().total()}"

    report, code = in_a_fork(child)

    assert code == 0
    assert report == "0 False 1"
    assert batches.buffer().total() == 4
    assert pending() is True


EXITING_PROCESS = """
import sys

import django
from django.conf import settings

settings.WHOS_ONLINE = {"REDIS_URL": sys.argv[1], "COUNT_HITS": True}
django.setup()

from whos_online.flushing import batches, flusher as flushing
from whos_online.recording import visits as recording

# No flusher thread: only the flush at exit can write these hits.
flushing.Flusher.schedule = lambda self, delay: None
for _ in range(5):
    recording.count_hit()
print(batches.buffer().total())
"""


def test_a_process_that_exits_writes_its_buffered_hits(settings, real_redis_url):
    settings.WHOS_ONLINE = {"REDIS_URL": real_redis_url, "ISOLATE_TESTS": False}
    admin_client().flushdb()
    started = int(time.time())

    result = subprocess.run(
        [sys.executable, "-c", EXITING_PROCESS, real_redis_url],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )

    assert (result.returncode, result.stdout, result.stderr) == (0, "5\n", "")
    samples = api.get_counter("hits", 60)
    assert sum(count for _, count in samples) == 5
    assert all(started - 60 <= start <= time.time() for start, _ in samples)
    for precision in PRECISIONS:
        assert total(precision) == 5, precision
    assert batches.buffer().total() == 0


# Exactly once: a batch whose write timed out may have been added by Redis all the same.


def test_a_batch_is_added_once_however_often_it_is_sent(backend, counting):
    client, config = admin_client(), get_config()
    amounts = {("hits", T0): 5}

    counters.add(client, config, amounts, batch=("token-a", 1))
    counters.add(client, config, amounts, batch=("token-a", 1))  # sent again: skipped
    counters.add(client, config, amounts, batch=("token-b", 1))  # another process's batch
    counters.add(client, config, amounts, batch=("token-a", 2))  # the next batch

    assert total(86400) == 15
    assert 0 < admin_client().ttl("{whos_online}:hits-applied:token-a") <= counters.APPLIED_MEMORY


def test_hits_counted_while_a_batch_is_in_flight_wait_for_it(counting):
    buffer = batches.HitBuffer()
    buffer.add(T0)
    first = buffer.take()
    buffer.add(T0 + 1)
    assert buffer.take() is None  # one batch at a time
    assert first is not None
    buffer.settle(first, added=False)
    assert buffer.take() is first  # the failed one first, and nothing newer with it
    buffer.settle(first, added=True)
    second = buffer.take()
    assert second is not None
    assert second.counts == {T0 + 1: 1}


@pytest.fixture
def stalled(real_redis_url, settings, breaker_clock) -> Iterator[DelayingProxy]:
    """The app's Redis behind a proxy that holds replies back: a write that times out on the
    client is carried out by Redis all the same."""
    direct = redis.Redis.from_url(real_redis_url)
    direct.flushdb()
    for source in SCRIPTS:  # else the first call only learns NOSCRIPT, and runs nothing
        direct.script_load(source)
    proxy = DelayingProxy(int(real_redis_url.rsplit(":", 1)[1].split("/")[0]))
    configure(settings, REDIS_URL=proxy.url, COUNT_HITS=True)
    whos_online.online_counts()  # a pooled connection, set up before the stall
    yield proxy
    proxy.close()


def test_a_flush_that_timed_out_is_not_counted_twice(stalled, breaker_clock, real_redis_url):
    for _ in range(100):
        recording.count_hit(T0)
    stalled.delay = 4 * clients.REQUEST_TIMEOUT

    assert recording.flush_hits() is False  # timed out; Redis added the batch meanwhile
    redis.Redis.from_url(real_redis_url).ping()  # the stalled reply has surely been dealt with
    stalled.delay = 0.0
    breaker_clock.advance(get_config().failure_backoff + 1)
    assert recording.flush_hits() is True

    assert total(86400) == 100
    assert batches.buffer().total() == 0


def test_hits_riding_on_a_visit_that_timed_out_are_not_counted_twice(
    stalled, breaker_clock, real_redis_url
):
    for _ in range(100):
        recording.count_hit(T0)
    stalled.delay = 4 * clients.REQUEST_TIMEOUT

    assert whos_online.record_guest("198.51.100.40") is False  # carried out by Redis anyway
    stalled.delay = 0.0
    breaker_clock.advance(get_config().failure_backoff + 1)
    assert whos_online.record_guest("198.51.100.41") is True  # the batch rides again

    assert total(86400) == 100
    assert batches.buffer().total() == 0
