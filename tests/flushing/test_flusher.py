"""Recording off the request path: visits queued in the process and written in batches."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import redis
from asgiref.sync import async_to_sync
from django.contrib.auth.models import AnonymousUser
from django.contrib.auth.signals import user_logged_out
from django.http import HttpRequest, HttpResponse
from django.test import AsyncRequestFactory, Client

import whos_online
from tests.support.helpers import GUEST_IP, configure, guest, members
from tests.support.processes import in_a_fork
from whos_online import apps
from whos_online.api import OnlineCounts
from whos_online.backend import clients, connection, keyspace
from whos_online.backend.clients import admin_client
from whos_online.config.settings import get_config
from whos_online.flushing import batches, stopping
from whos_online.flushing import flusher as flushing
from whos_online.flushing import queue as flush_jobs
from whos_online.flushing.queue import FlushJobs, Job, RoomLeave, VisitQueue
from whos_online.live import subscription
from whos_online.middleware import WhosOnlineMiddleware
from whos_online.recording import throttle
from whos_online.recording import visits as recording
from whos_online.store import epochs, users
from whos_online.store.items import GO, KEEP, STAY

ROOT = Path(__file__).resolve().parents[2]
COOKIE = throttle.COOKIE_NAME
#: What a browser sends with a page it opens, and with a request a page's script makes.
PAGE_VIEW: dict[str, Any] = {"HTTP_SEC_FETCH_DEST": "document"}
FETCH: dict[str, Any] = {"HTTP_SEC_FETCH_DEST": "empty"}


@pytest.fixture
def queued(settings) -> None:
    """Visits wait in the queue until a test writes them (the thread would wait 10 s)."""
    configure(settings, FLUSH_INTERVAL=10)


def run_python(
    source: str, *arguments: str, settings: str | None, timeout: int
) -> subprocess.CompletedProcess[str]:
    """Run ``source`` in a Python process of its own, from the repository's root, with only
    ``PATH`` (and the settings module, if any) in its environment."""
    env = {"PATH": "/usr/bin:/bin"}
    if settings is not None:
        env["DJANGO_SETTINGS_MODULE"] = settings
    return subprocess.run(
        [sys.executable, "-c", source, *arguments],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def guests_in(count: int, first: int = 1) -> list[str]:
    return [f"198.51.100.{first + number}" for number in range(count)]


# Queued, then written in one call per shard


def test_a_recorded_request_queues_its_visit_and_waits_on_nothing(r, queued, redis_calls):
    response = Client(REMOTE_ADDR=GUEST_IP).get("/plain/")

    assert response.status_code == 200
    assert COOKIE in response.cookies
    assert redis_calls.trips == []
    assert len(flushing.current().queue) == 1

    assert whos_online.flush() is True
    assert redis_calls.trips == [["EVALSHA"]]
    assert members(r, "guests") == [guest(GUEST_IP)]


def test_a_flush_writes_all_of_a_shard_s_visits_in_one_call(r, queued, redis_calls):
    for address in guests_in(50):
        Client(REMOTE_ADDR=address).get("/plain/")
    assert redis_calls.trips == []

    assert whos_online.flush() is True

    assert redis_calls.trips == [["EVALSHA"]]
    assert len(members(r, "guests")) == 50
    assert whos_online.online_counts() == OnlineCounts(0, 50, 0, 50)


def test_with_shards_a_flush_is_one_call_per_shard_in_one_round_trip(
    settings, backend, queued, redis_calls
):
    configure(settings, SHARDS=4)
    for address in guests_in(40):
        Client(REMOTE_ADDR=address).get("/plain/")

    assert whos_online.flush() is True

    (trip,) = redis_calls.trips
    assert trip == ["EVALSHA"] * 4
    assert whos_online.online_counts().guests == 40


def test_the_thread_writes_within_the_interval(r, settings, redis_calls):
    configure(settings, FLUSH_INTERVAL=0.05)
    for address in guests_in(5):
        Client(REMOTE_ADDR=address).get("/plain/")
    assert redis_calls.trips == []

    deadline = time.monotonic() + 10
    while r.zcard("{whos_online}:guests") < 5:
        assert time.monotonic() < deadline, "the flusher's thread never wrote the queue"
        time.sleep(0.01)
    assert [trip for trip in redis_calls.trips if trip != ["ZCARD"]] == [["EVALSHA"]]


def test_a_settings_change_stops_the_thread_before_it_closes_the_clients(
    r, queued, settings, monkeypatch
):
    # The thread may be inside a call as the settings change (tests change them all the time):
    # closing its client's socket under it failed there (fakeredis: "generator already executing").
    Client(REMOTE_ADDR=GUEST_IP).get("/plain/")
    assert whos_online.flush() is True  # the request client is made
    Client(REMOTE_ADDR="198.51.100.1").get("/plain/")  # the thread waits to write this one
    thread = flushing.current().thread._thread
    assert thread is not None
    assert thread.is_alive()
    alive_at_close: list[bool] = []
    close = clients.close

    def noting_close(client: Any) -> None:
        alive_at_close.append(thread.is_alive())
        close(client)

    monkeypatch.setattr(clients, "close", noting_close)

    configure(settings, FLUSH_INTERVAL=5)

    assert alive_at_close
    assert not any(alive_at_close)


def test_flush_interval_zero_writes_each_visit_in_its_request(r, redis_calls):
    assert get_config().flush_interval == 0  # as the test settings have it
    Client(REMOTE_ADDR=GUEST_IP).get("/plain/")

    assert redis_calls.trips == [["EVALSHA"]]
    assert r.zcard("{whos_online}:guests") == 1


# Two visits of one person in one flush


def test_two_visits_of_one_person_become_their_latest(r, queued):
    first, second = time.time() - 30, time.time()
    assert flushing.current().put(recording.member_visit("guests", "m", first, room="topic:1"))
    assert flushing.current().put(recording.member_visit("guests", "m", second, room="topic:2"))
    assert len(flushing.current().queue) == 1

    assert whos_online.flush() is True

    assert r.zscore("{whos_online}:guests", "m") == pytest.approx(second, abs=0.01)
    assert whos_online.online_counts(room="topic:2").guests == 1
    assert whos_online.online_counts(room="topic:1").guests == 0


@pytest.mark.parametrize(
    ("moves", "room"),
    [
        ([("a", GO), ("b", GO), ("a", GO)], "a"),
        ([("a", GO), ("", KEEP)], "a"),  # the page's own fetch after its page view
        ([("a", GO), ("b", STAY)], "a"),  # another tab's word: the page view wins
        ([("a", GO), ("", GO)], ""),  # a page in no room
        ([("a", STAY)], "a"),
    ],
    ids=["a-b-a", "go-keep", "go-stay", "go-out", "stay"],
)
def test_the_room_of_a_batch_is_the_latest_page_view_s(backend, queued, moves, room):
    now = time.time()
    for step, (name, mode) in enumerate(moves):
        visit = recording.member_visit("guests", "m", now + step, room=name, room_mode=mode)
        flushing.current().put(visit)

    assert whos_online.flush() is True

    for name in ("a", "b"):
        expected = 1 if name == room else 0
        assert whos_online.online_counts(room=name).guests == expected, name


def test_a_login_and_a_logout_in_one_batch(r, queued, alice):
    now = time.time()
    details = users.details(alice, get_config())
    flushing.current().put(recording.member_visit("guests", "m", now))
    flushing.current().put(recording.user_visit(details, now + 1, former_guest="m"))

    assert whos_online.flush() is True

    assert members(r, "guests") == []
    assert members(r, "users") == [str(alice.pk)]


def test_an_older_visit_sent_late_leaves_the_newer_one_standing(r, queued):
    """A batch sent again after an outage may reach Redis after a newer visit of the same person
    that another process wrote: the newer time, and its room, stand."""
    now = time.time()
    assert whos_online.record_guest("192.0.2.1", now=now, room="b") is True
    member = guest("192.0.2.1")
    flushing.current().put(recording.member_visit("guests", member, now - 10, room="a"))

    assert whos_online.flush() is True

    assert r.zscore("{whos_online}:guests", member) == pytest.approx(now, abs=0.01)
    assert whos_online.online_counts(room="b").guests == 1
    assert whos_online.online_counts(room="a").guests == 0


def test_a_logout_without_a_guest_to_record_waits_on_nothing(r, queued, alice, redis_calls):
    """The user's removal is a job for the flusher, which a read of the process runs first."""
    assert whos_online.record_user(alice) is True
    whos_online.flush()
    redis_calls.clear()

    user_logged_out.send(sender=type(alice), request=None, user=alice)

    assert redis_calls.trips == []
    assert len(flushing.current().jobs) == 1
    assert whos_online.online_counts().users == 0
    assert len(flushing.current().jobs) == 0
    assert members(r, "users") == []


def test_a_logout_that_could_not_be_written_is_written_at_the_next_flush(r, queued, alice, outage):
    assert whos_online.record_user(alice) is True
    whos_online.flush()
    outage.begin()
    user_logged_out.send(sender=type(alice), request=None, user=alice)
    flushing.current().put(recording.member_visit("guests", "m", time.time()))

    assert whos_online.flush() is False
    assert len(flushing.current().jobs) == 1
    assert members(r, "users") == [str(alice.pk)]

    outage.end()
    assert whos_online.flush() is True
    assert len(flushing.current().jobs) == 0
    assert members(r, "users") == []
    assert members(r, "guests") == ["m"]


def test_a_login_in_the_millisecond_of_a_logout_stands(r, queued, alice, monkeypatch):
    """The logout's removal is written before what was queued after it."""
    at = time.time()
    monkeypatch.setattr(apps, "time", SimpleNamespace(time=lambda: at))
    apps.remove_logout(None, None, alice)
    apps.record_login(None, None, alice)

    assert whos_online.flush() is True

    assert members(r, "users") == [str(alice.pk)]


def test_a_logout_that_fails_keeps_the_thread_away_for_the_back_off(r, queued, alice, outage):
    """A job a breaker refuses backs off like a failed batch: on a cluster, where one shard's
    breaker does not hold the flush back, the thread would otherwise flush again at once."""
    assert whos_online.record_user(alice) is True
    outage.begin()
    user_logged_out.send(sender=type(alice), request=None, user=alice)

    assert whos_online.flush() is False
    flushing.current().schedule(0)

    deadline = flushing.current().thread.deadline
    assert deadline is not None
    assert deadline >= time.monotonic() + 0.5


def test_jobs_after_a_failed_one_wait_behind_it_in_order(backend, queued, monkeypatch, caplog):
    done: list[str] = []
    refusals = iter([True])

    def write(name: str) -> Any:
        def job(client: Any, config: Any) -> None:
            if name == "second" and next(refusals, False):
                raise redis.ConnectionError("refused")
            done.append(name)

        return job

    after = FlushJobs()
    for name in ("first", "second", "third"):
        assert after.add(Job(write(name))) is True
    monkeypatch.setattr(flush_jobs, "MOST_WAITING", 3)

    assert after.run() == frozenset({""})
    assert done == ["first"]
    assert after.add(Job(write("fourth"))) is True
    with caplog.at_level(logging.WARNING, logger="whos_online"):
        assert after.add(Job(write("fifth"))) is False  # three wait already: dropped
        assert after.add(Job(write("sixth"))) is False
    assert len([record for record in caplog.records if "logouts" in record.getMessage()]) == 1
    monkeypatch.setattr(
        connection, "time", SimpleNamespace(monotonic=lambda: time.monotonic() + 99)
    )

    assert after.run() == frozenset()
    assert done == ["first", "second", "third", "fourth"]
    assert len(after) == 0


# Reads see the process's own visits


def test_a_read_writes_the_queue_first_in_the_same_round_trip(backend, queued, redis_calls):
    Client(REMOTE_ADDR=GUEST_IP).get("/plain/")
    assert redis_calls.trips == []

    assert whos_online.online_counts() == OnlineCounts(0, 1, 0, 1)

    assert redis_calls.trips == [["EVALSHA", "EVALSHA"]]  # the batch, then the snapshot
    assert len(flushing.current().queue) == 0


def test_the_api_s_other_reads_write_the_queue_first(backend, queued, alice):
    Client(REMOTE_ADDR=GUEST_IP).force_login(alice)  # the login receiver writes at once
    flushing.current().put(recording.member_visit("guests", "late", time.time()))

    assert whos_online.is_online(alice) is True
    assert len(flushing.current().queue) == 0


@pytest.mark.parametrize(
    "read",
    [
        whos_online.is_online,
        whos_online.last_seen,
        lambda user: whos_online.presence([user]),
        lambda user: whos_online.online_user_pks(10),
        lambda user: whos_online.peak(),
        lambda user: whos_online.unique_visitors(),
    ],
    ids=["is_online", "last_seen", "presence", "online_user_pks", "peak", "unique_visitors"],
)
def test_each_api_read_writes_the_queue_in_its_own_round_trip(r, queued, alice, redis_calls, read):
    flushing.current().put(recording.member_visit("guests", "m", time.time()))

    read(alice)

    (trip,) = redis_calls.trips
    assert trip[0] == "EVALSHA"  # the batch, then the read's commands
    assert len(trip) > 1
    assert len(flushing.current().queue) == 0
    assert r.zscore("{whos_online}:guests", "m") is not None


# Failures


def test_a_failed_flush_is_sent_again_before_newer_visits(r, queued, outage, caplog) -> None:
    down = outage
    now = time.time()
    flushing.current().put(recording.member_visit("guests", "m", now - 2, room="a"))
    with caplog.at_level(logging.WARNING, logger="whos_online"):
        down.begin()
        assert whos_online.flush() is False
        assert whos_online.flush() is False  # within FAILURE_BACKOFF: Redis is not tried
    flushing.current().put(recording.member_visit("guests", "n", now - 1))
    flushing.current().put(recording.member_visit("guests", "m", now, room="b"))

    down.end()
    assert whos_online.flush() is True

    assert [record.levelname for record in caplog.records] == ["WARNING"]
    assert sorted(members(r, "guests")) == ["m", "n"]
    assert whos_online.online_counts(room="b").guests == 1
    assert whos_online.online_counts(room="a").guests == 0


def flusher_with_a_queue_of(monkeypatch: pytest.MonkeyPatch, size: int) -> flushing.Flusher:
    """The process's flusher, for this test, with a queue bounded to ``size`` people."""
    fresh = flushing.Flusher()
    fresh.queue = VisitQueue(size=size)
    monkeypatch.setattr(flushing, "current", lambda: fresh)
    return fresh


def test_a_full_queue_drops_what_comes_and_says_so_once(
    backend, queued, monkeypatch, outage, caplog
):
    fresh = flusher_with_a_queue_of(monkeypatch, 3)
    outage.begin()
    now = time.time()
    with caplog.at_level(logging.WARNING, logger="whos_online"):
        accepted = [fresh.put(recording.member_visit("guests", f"m{n}", now + n)) for n in range(5)]
        assert fresh.flush()  # failed: kept for later, still counting against the bound
        accepted.append(fresh.put(recording.member_visit("guests", "late", now + 9)))

    assert accepted == [True, True, True, False, False, False]
    assert fresh.queue.dropped == 3
    full = [record for record in caplog.records if "queue is full" in record.getMessage()]
    assert len(full) == 1

    outage.end()
    assert fresh.flush() == frozenset()
    assert whos_online.online_counts().guests == 3


def test_no_throttle_cookie_once_redis_is_known_down(r, queued, outage):
    down = outage
    down.begin()
    first = Client(REMOTE_ADDR="192.0.2.1").get("/plain/")
    assert COOKIE in first.cookies  # nobody knew yet: its visit waits in the queue
    assert whos_online.flush() is False

    later = Client(REMOTE_ADDR="192.0.2.2").get("/plain/")

    assert COOKIE not in later.cookies
    down.end()
    assert whos_online.flush() is True
    assert len(members(r, "guests")) == 2  # both written once Redis answered


@pytest.mark.parametrize("fault", ["down", "refusing writes"])
def test_no_throttle_cookie_after_the_back_off_until_a_write_succeeds(
    r, queued, outage, breaker_clock, monkeypatch, *, fault
):
    """Once the back-off has passed, the next flush tries Redis again; until one succeeds,
    Redis is no more known to be up than during the back-off, and no cookie is handed out."""
    config = get_config()
    if fault == "down":
        outage.begin()
        Client(REMOTE_ADDR="192.0.2.1").get("/plain/")
        assert whos_online.flush() is False  # the failure that opens the breaker
    else:
        connection.refusals().failed(config.redis_target, redis.ResponseError("OOM full"), 10)
        Client(REMOTE_ADDR="192.0.2.1").get("/plain/")
    breaker_clock.advance(config.failure_backoff + 1)  # a write may be tried again

    during = Client(REMOTE_ADDR="192.0.2.2").get("/plain/")

    assert COOKIE not in during.cookies
    if fault == "down":
        assert whos_online.flush() is False  # still down: the retry fails
        assert COOKIE not in Client(REMOTE_ADDR="192.0.2.3").get("/plain/").cookies
        monkeypatch.setattr(connection, "request_client", outage.live)
        breaker_clock.advance(config.failure_backoff + 1)
    assert whos_online.flush() is True  # it answers again
    after = Client(REMOTE_ADDR="192.0.2.4").get("/plain/")
    assert COOKIE in after.cookies
    assert len(members(r, "guests")) == (4 if fault == "down" else 3)


def test_during_an_outage_a_person_who_comes_back_is_one_visit_waiting(
    r, queued, monkeypatch, outage
):
    """While writes fail, the pages of one person keep one visit waiting (their latest), and
    the bound of the queue counts people, not pages."""
    fresh = flusher_with_a_queue_of(monkeypatch, 3)
    outage.begin()
    now = time.time()
    for n in range(5):
        assert fresh.put(recording.member_visit("guests", "m", now - 10 + n))
        assert fresh.flush()  # failed, or held back while the breaker is open

    assert fresh.put(recording.member_visit("guests", "a", now)) is True
    assert fresh.put(recording.member_visit("guests", "b", now)) is True
    assert len(fresh.queue) == 3
    assert fresh.queue.dropped == 0

    outage.end()
    assert fresh.flush() == frozenset()
    assert members(r, "guests") == ["a", "b", "m"]
    assert r.zscore("{whos_online}:guests", "m") == pytest.approx(now - 6, abs=0.01)


def counting_encodings(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Every visit the flusher turns into entries of a batch, from now on."""
    encoded: list[object] = []
    original = batches.entries

    def entries(config: Any, item: Any) -> Any:
        encoded.append(item)
        return original(config, item)

    monkeypatch.setattr(batches, "entries", entries)
    return encoded


def test_while_redis_is_known_down_a_flush_leaves_the_queue_as_it_is(
    r, queued, monkeypatch, outage
):
    outage.begin()
    now = time.time()
    flushing.current().put(recording.member_visit("guests", "m", now - 1))
    assert whos_online.flush() is False  # the failure that opens the breaker
    encoded = counting_encodings(monkeypatch)

    flushing.current().put(recording.member_visit("guests", "n", now))
    assert whos_online.flush() is False
    assert whos_online.online_counts() == OnlineCounts(0, 0, 0, 0)  # a read: it fails too

    assert encoded == []
    assert len(flushing.current().queue) == 2
    outage.end()
    assert whos_online.flush() is True
    assert members(r, "guests") == ["m", "n"]


def test_a_read_while_redis_refuses_writes_reads_alone_and_leaves_the_queue(
    r, queued, monkeypatch, redis_calls
):
    from redis.exceptions import ResponseError

    config = get_config()
    connection.refusals().failed(config.redis_target, ResponseError("OOM full"), 10)
    flushing.current().put(recording.member_visit("guests", "m", time.time()))
    encoded = counting_encodings(monkeypatch)

    assert whos_online.online_counts() == OnlineCounts(0, 0, 0, 0)

    assert redis_calls.trips == [["EVALSHA"]]  # the snapshot alone
    assert encoded == []
    assert len(flushing.current().queue) == 1


def test_after_a_failed_flush_requests_do_not_bring_the_next_one_forward(backend, queued, outage):
    outage.begin()
    flushing.current().put(recording.member_visit("guests", "m", time.time()))
    assert whos_online.flush() is False

    flushing.current().schedule(0.1)  # what a recorded request asks

    deadline = flushing.current().thread.deadline
    assert deadline is not None
    assert deadline - time.monotonic() > get_config().failure_backoff - 1


def test_what_an_outage_dropped_is_logged_once_writes_succeed(
    backend, queued, monkeypatch, outage, caplog
):
    fresh = flusher_with_a_queue_of(monkeypatch, 2)
    outage.begin()
    now = time.time()
    with caplog.at_level(logging.INFO, logger="whos_online"):
        for n in range(5):
            fresh.put(recording.member_visit("guests", f"m{n}", now))
        assert fresh.flush()
        outage.end()
        assert fresh.flush() == frozenset()
        assert fresh.flush() == frozenset()

    lines = [record.getMessage() for record in caplog.records]
    full = [line for line in lines if "queue is full" in line]
    dropped = [line for line in lines if "dropped 3 visits" in line]
    assert len(full) == 1
    assert "(2 visits waiting" in full[0]
    assert len(dropped) == 1


def test_forget_drops_what_is_queued_of_those_persons(r, queued):
    now = time.time()
    flushing.current().put(recording.member_visit("guests", "m", now, room="a"))
    flushing.current().put(RoomLeave("guests", "m", "a", now))
    flushing.current().put(recording.member_visit("guests", "n", now))
    flushing.current().put(recording.member_visit("bots", "b", now))

    flushing.current().forget(["guests:m", "bots:b"])

    assert len(flushing.current().queue) == 1
    assert whos_online.flush() is True
    assert members(r, "guests") == ["n"]
    assert members(r, "bots") == []


def test_forget_drops_what_waits_to_be_sent_again(r, queued, outage, alice):
    outage.begin()
    now = time.time()
    details = users.details(alice, get_config())
    flushing.current().put(recording.user_visit(details, now))
    flushing.current().put(recording.member_visit("guests", "n", now))
    assert whos_online.flush() is False

    flushing.current().forget([f"u:{alice.pk}"])

    outage.end()
    assert whos_online.flush() is True
    assert members(r, "users") == []
    assert members(r, "guests") == ["n"]


def test_forget_during_a_flush_that_fails_keeps_it_from_coming_back(r, queued, monkeypatch, outage):
    import redis

    from whos_online.store import scripts

    now = time.time()
    flushing.current().put(recording.member_visit("guests", "m", now))
    flushing.current().put(recording.member_visit("guests", "n", now))

    def forgotten_on_the_way(client: Any, calls: Any) -> Any:
        flushing.current().forget(["guests:m"])  # an erasure, while the batch is on its way
        raise redis.exceptions.ConnectionError("cut off")

    monkeypatch.setattr(scripts, "run", forgotten_on_the_way)
    assert whos_online.flush() is False
    monkeypatch.undo()
    outage.end()  # the back-off passed

    assert whos_online.flush() is True
    assert members(r, "guests") == ["n"]


# A Redis that lost its data


def has_epoch(cookie: str) -> bool:
    """Whether a throttle cookie carries its shard's epoch: a mark after its MAC that starts
    with ``EPOCH_MARK`` (not a substring test: a MAC may begin with "e" too)."""
    marks = cookie.removesuffix(throttle.ARRIVED_SUFFIX).split(".")[2:]
    return any(f".{mark}".startswith(throttle.EPOCH_MARK) for mark in marks)


def test_a_redis_that_lost_its_data_is_noticed_at_the_next_read(r, settings):
    configure(settings, SNAPSHOT_MAX_AGE=2)
    reader = Client(REMOTE_ADDR="192.0.2.1")
    assert reader.get("/").status_code == 200
    cookie = reader.cookies[COOKIE].value
    assert has_epoch(cookie)
    assert reader.get("/plain/").status_code == 200  # throttled: nothing written
    r.flushdb()  # a restart without persistence, or a cache.clear()

    Client(REMOTE_ADDR="192.0.2.2").get("/")  # any read of the process learns of it
    reader.get("/plain/")  # the cookie is still fresh, but speaks of data that is gone

    assert guest("192.0.2.1") in members(r, "guests")
    assert r.get("{whos_online}:epoch") is not None


def test_a_fresh_process_s_first_cookies_cost_no_second_write(r, settings, redis_calls):
    """A process that does not know its shard's epoch yet hands out a cookie without one; once
    it learns the epoch, which began before that visit, the cookie still spares writes."""
    whos_online.record_guest("192.0.2.50")
    r.set("{whos_online}:epoch", epochs.new_epoch(time.time() - 3600))  # begun an hour ago
    configure(settings, FLUSH_INTERVAL=10)  # a new process: it knows no epoch
    assert epochs.current().of(keyspace.layout(get_config())[0]) == ""
    reader = Client(REMOTE_ADDR="192.0.2.1")
    reader.get("/plain/")  # queued; its cookie is handed out before any flush
    assert not has_epoch(reader.cookies[COOKIE].value)
    assert whos_online.flush() is True  # the process learns the epoch
    redis_calls.clear()

    reader.get("/plain/")

    assert redis_calls.trips == []
    assert flushing.current().pending() is False  # nothing queued for a second write


def test_a_cookie_without_an_epoch_from_before_redis_lost_its_data_spares_nothing(r, settings):
    configure(settings, FLUSH_INTERVAL=10)
    reader = Client(REMOTE_ADDR="192.0.2.1")
    reader.get("/plain/")  # a cookie without an epoch
    assert whos_online.flush() is True
    r.flushdb()
    later = time.time() + epochs.CLOCK_SKEW + 1
    whos_online.record_guest("192.0.2.50", now=later)  # the next epoch begins after that visit
    epochs.current().learn(keyspace.layout(get_config())[0].tag, epochs.new_epoch(later))

    reader.get("/plain/")
    assert whos_online.flush() is True

    assert guest("192.0.2.1") in members(r, "guests")


def test_the_memory_of_recent_clients_forgets_what_redis_lost(r, settings):
    """A client without cookies, remembered by the process, is written again once an epoch it
    knew changes."""
    for _ in range(2):
        Client(REMOTE_ADDR="192.0.2.1").get("/plain/")  # the second is spared by the memory
    r.flushdb()
    whos_online.online_counts()  # learns the loss
    Client(REMOTE_ADDR="192.0.2.1").get("/plain/")

    assert members(r, "guests") == [guest("192.0.2.1")]


def test_the_memory_s_generation_changes_with_a_changed_epoch(settings, backend):
    """What the memory of recent visitors vouches for lasts while nothing stored may have been
    lost: a known epoch that changes starts a new generation; an epoch learned for the first
    time, or learned again, does not."""
    tag = keyspace.layout(get_config())[0].tag
    start = epochs.generation()
    epochs.current().learn(tag, "now")
    epochs.current().learn(tag, "now")
    assert epochs.generation() == start

    epochs.current().learn(tag, "later")
    assert epochs.generation() != start


@pytest.mark.parametrize(
    "error",
    [
        redis.exceptions.ConnectionError("down"),
        redis.exceptions.TimeoutError("Timeout reading from socket"),  # strikes, opens nothing
        redis.exceptions.ReadOnlyError("You can't write against a read only replica."),
    ],
    ids=["lost", "timed-out", "refused"],
)
def test_the_memory_s_generation_changes_with_a_failed_call(settings, backend, error):
    """A call of the request path or the flusher that failed, timed out once, or was refused
    may have lost what it wrote: a new generation. The live streams' subscription failing is no
    such sign: it writes nothing."""
    start = epochs.generation()
    subscription.breaker().failed(get_config().redis_target, error, 0.01)
    assert epochs.generation() == start

    connection.Attempt(get_config(), None, writes=True).failed(error)
    assert epochs.generation() != start


def test_a_cookie_from_another_epoch_is_not_counted_as_the_viewer(settings, backend):
    epochs.current().learn(keyspace.layout(get_config())[0].tag, "now")
    assert epochs.current().gone("then", get_config()) is True
    assert epochs.current().gone("now", get_config()) is False
    assert epochs.current().gone("", get_config()) is False  # issued before the process knew


def test_a_cookie_is_taken_at_its_word_until_every_shard_s_epoch_is_known(settings, backend):
    configure(settings, SHARDS=2)
    first, second = keyspace.layout(get_config())
    epochs.current().learn(first.tag, "now")

    assert epochs.current().outdated("then", get_config()) is False
    assert epochs.current().outdated("", get_config()) is False
    epochs.current().learn(second.tag, "also")
    assert epochs.current().outdated("then", get_config()) is True
    assert epochs.current().outdated("", get_config()) is True
    assert epochs.current().outdated("also", get_config()) is False


def test_a_shard_without_an_epoch_is_one_that_lost_its_data(settings, backend):
    epochs.current().learn(keyspace.layout(get_config())[0].tag, "")  # read after a restart

    assert epochs.current().gone("then", get_config()) is True
    assert epochs.current().gone("", get_config()) is True


def test_a_cookie_handed_out_before_the_process_knew_the_epoch_is_renewed(r, settings):
    """A process's first pages, before it has read or written anything, hand out cookies
    without an epoch: once it knows the epoch, such a visitor is written once more and gets one,
    so that a Redis restarted empty later is noticed for them too."""
    configure(settings, FLUSH_INTERVAL=10)  # the visit waits in the queue while its page answers
    reader = Client(REMOTE_ADDR="192.0.2.1")
    first = reader.get("/plain/").cookies[COOKIE].value
    assert not has_epoch(first)
    assert whos_online.flush() is True  # writes it, and sets and learns the epoch

    renewed = reader.get("/plain/").cookies[COOKIE].value
    assert whos_online.flush() is True
    assert has_epoch(renewed)
    r.flushdb()
    whos_online.online_counts()  # the process reads, and learns that Redis lost its data
    reader.get("/plain/")
    assert whos_online.flush() is True

    assert members(r, "guests") == [guest("192.0.2.1")]


# Layouts of another SHARDS


def test_an_erasure_reaches_a_layout_no_cleanup_has_seen(r, settings, alice):
    assert whos_online.record_user(alice) is True  # SHARDS 1
    configure(settings, SHARDS=8)

    assert whos_online.forget_user(alice) is True

    assert list(r.scan_iter(match="*:user:*")) == []
    assert r.zscore("{whos_online}:users", str(alice.pk)) is None


def test_each_process_registers_the_layout_it_writes_in(r, settings, alice, bob):
    configure(settings, SHARDS=4)
    for address in guests_in(20):
        whos_online.record_guest(address)  # some of them in shard 0, which registers

    assert sorted(int(each) for each in r.smembers("{whos_online}:layouts")) == [1, 4]


def test_a_logout_reaches_the_layouts_the_site_left(r, settings, alice, client):
    configure(settings, SHARDS=4)
    assert whos_online.record_user(alice) is True
    configure(settings, SHARDS=1)  # switched back, before any cleanup
    r.sadd("{whos_online}:layouts", 1, 4)
    client.force_login(alice)
    client.get("/plain/")

    client.post("/logout/")
    configure(settings, SHARDS=4)  # and on again

    assert whos_online.online_counts().users == 0


# A primary key may hold any character


def test_a_primary_key_with_a_comma_leaves_nobody_else_s_room(r, backend):
    assert whos_online.record_guest("192.0.2.1", room="topic:1") is True
    member = guest("192.0.2.1")

    assert whos_online.forget_user(f"x,guests:{member}") is True

    assert whos_online.online_counts(room="topic:1").guests == 1
    assert r.hget("{whos_online}:rooms:where", f"guests:{member}") == b"topic:1"


# The cookie a memory hands out


def test_a_cookie_from_the_memory_runs_from_the_visit_that_was_stored(
    backend, monkeypatch, mid_utc_day
):
    start = time.time()  # the guest's pseudonym must not change at midnight meanwhile
    Client(REMOTE_ADDR="192.0.2.1").get("/plain/")  # recorded: remembered until start + 120
    monkeypatch.setattr(time, "time", lambda: start + 100)

    response = Client(REMOTE_ADDR="192.0.2.1").get("/plain/")  # spared by the memory

    cookie = throttle.read_cookie(
        response.cookies[COOKIE].value, throttle.binding("", "192.0.2.1"), start + 100, 120, 600
    )
    assert cookie is not None
    assert cookie.expiry <= start + 121  # not start + 100 + 120


# ASGI


def test_a_client_that_hangs_up_cannot_strand_a_flush(r, settings, monkeypatch):
    """With FLUSH_INTERVAL 0 under ASGI the request awaits its write in a worker thread; the
    request's cancellation leaves that write, and the page hits it carries, to finish."""
    configure(settings, COUNT_HITS=True)
    release, started = threading.Event(), threading.Event()
    original = flushing.current().flush

    def slow_flush() -> frozenset[str]:
        started.set()
        release.wait(5)
        return original()

    monkeypatch.setattr(flushing.current(), "flush", slow_flush)

    async def get_response(request: HttpRequest) -> HttpResponse:
        return HttpResponse("async")

    middleware = WhosOnlineMiddleware(get_response)
    request = AsyncRequestFactory().get("/plain/")
    request.META["REMOTE_ADDR"] = "198.51.100.20"
    request.user = AnonymousUser()

    async def hang_up() -> None:
        import asyncio
        import contextlib

        task = asyncio.ensure_future(middleware(request))  # type: ignore [arg-type]
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 5)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    async_to_sync(hang_up)()
    release.set()
    deadline = time.monotonic() + 5
    while batches.buffer().total():
        assert time.monotonic() < deadline
        time.sleep(0.01)
    monkeypatch.setattr(flushing.current(), "flush", original)

    for _ in range(3):
        recording.count_hit()
    assert whos_online.flush() is True
    assert sum(count for _, count in whos_online.get_counter("hits", 86400)) == 4
    assert members(r, "guests") == [guest("198.51.100.20")]


def test_a_sigterm_writes_the_queue_and_then_every_visit_at_once(r, queued):
    forwarded: list[int] = []
    handler = stopping.WriteThenHandOn(lambda signum, frame: forwarded.append(signum))
    flushing.current().put(recording.member_visit("guests", "m", time.time()))

    handler(signal.SIGTERM, None)

    assert forwarded == [signal.SIGTERM]
    assert members(r, "guests") == ["m"]
    assert flushing.writes_at_once(get_config()) is True
    Client(REMOTE_ADDR=GUEST_IP).get("/plain/")  # written in its request from now on
    assert r.zcard("{whos_online}:guests") == 2


SIGNALLED_PROCESS = """
import os
import signal
import sys
import threading
import time

import django
from django.conf import settings

forwarded = []
signal.signal(signal.SIGTERM, lambda signum, frame: forwarded.append(signum))  # the server's
settings.WHOS_ONLINE = {"SNAPSHOT_MAX_AGE": 0, "FLUSH_INTERVAL": 10}
django.setup()  # whos_online's handler goes over the server's

from whos_online.config import process
from whos_online.flushing import flusher as flushing, queue as visit_queue
from whos_online.recording import visits as recording
from whos_online.backend.clients import admin_client

flushing.EXIT_WAIT = 0.2  # this very thread holds the lock: waiting longer would not help
if sys.argv[1] == "replaced":
    process.reset_home()  # settings changed since: another flusher
original = visit_queue.merge


def merge(earlier, later):
    os.kill(os.getpid(), signal.SIGTERM)  # arrives while put holds the queue's lock
    return original(earlier, later)


visit_queue.merge = merge
now = time.time()
flushing.current().put(recording.member_visit("guests", "m", now - 1))
flushing.current().put(recording.member_visit("guests", "m", now))
visit_queue.merge = original
for thread in threading.enumerate():
    if thread is not threading.current_thread():
        thread.join(10)
stored = admin_client().zrange("{whos_online}:guests", 0, -1)
print("done", forwarded, process.is_stopping(), [m.decode() for m in stored])
"""


@pytest.mark.parametrize("flusher", ["same", "replaced"])
def test_a_sigterm_inside_a_lock_of_the_main_thread_writes_once_it_is_let_go(flusher):
    """The handler runs on the thread the signal interrupted, which may hold the queue's lock
    (an ASGI server's event loop, queueing a visit): it must not wait on that lock itself.
    It writes the queue of the flusher in place when the signal comes."""
    result = run_python(SIGNALLED_PROCESS, flusher, settings="tests.settings", timeout=30)

    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[0] == f"done [{int(signal.SIGTERM)}] True ['m']"


# Process exit

EXITING_PROCESS = """
import sys

import django
from django.conf import settings

settings.WHOS_ONLINE = {"REDIS_URL": sys.argv[1], "COUNT_HITS": True, "FLUSH_INTERVAL": 10}
django.setup()

import whos_online
from whos_online.flushing import batches, flusher as flushing
from whos_online.recording import visits as recording

# No thread: only the flush at exit can write these.
flushing.Flusher.schedule = lambda self, delay: None
whos_online.record_guest("192.0.2.9")  # written at once, and a batch of hits with it
recording.count_hit()
flushing.current().put(recording.member_visit("guests", "queued", __import__("time").time()))
for _ in range(4):
    recording.count_hit()
print(len(flushing.current().queue), batches.buffer().total(), batches.buffer().token)
"""


def test_a_process_that_exits_writes_its_queue_and_forgets_its_batches(settings, real_redis_url):
    settings.WHOS_ONLINE = {"REDIS_URL": real_redis_url, "ISOLATE_TESTS": False}
    admin_client().flushdb()

    result = run_python(EXITING_PROCESS, real_redis_url, settings="tests.settings", timeout=60)

    assert result.returncode == 0, result.stderr
    queued_visits, buffered, token = result.stdout.split()
    assert (queued_visits, buffered) == ("1", "5")
    client = admin_client()
    stored: Any = client.zrange("{whos_online}:guests", 0, -1)
    assert sorted(member.decode() for member in stored) == sorted(["queued", guest("192.0.2.9")])
    assert sum(count for _, count in whos_online.get_counter("hits", 86400)) == 5
    # The key that remembered its batches of hits goes with the process.
    assert client.exists(f"{{whos_online}}:hits-applied:{token}") == 0


IDLE_PROCESS = """
import django
from django.conf import settings

settings.configure(
    INSTALLED_APPS=["django.contrib.auth", "django.contrib.contenttypes", "whos_online"],
    WHOS_ONLINE={"REDIS_ALIAS": "default"},  # a local-memory cache: not a valid configuration
)
django.setup()
"""


def test_a_process_with_nothing_to_write_exits_without_reading_the_settings():
    """A process that recorded nothing (``manage.py check`` on a site not configured yet) has
    nothing to write at exit, and its exit does not fail on the settings."""
    result = run_python(IDLE_PROCESS, settings=None, timeout=60)

    assert result.returncode == 0
    assert result.stderr == ""


def test_the_queue_is_process_state_a_forked_child_starts_without(queued):
    """A child of a fork (a server's worker) writes its own visits, not its parent's."""
    import os

    if not hasattr(os, "fork"):
        pytest.skip("needs os.fork")
    flushing.current().put(recording.member_visit("guests", "parent's", time.time()))

    report, _ = in_a_fork(lambda: str(len(flushing.current().queue)))

    assert report == "0"
    assert len(flushing.current().queue) == 1
