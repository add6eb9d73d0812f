"""A stopping process writes what it holds through a short stall of Redis: its writes try again,
past the breakers, until ``STOP_TIMEOUT`` after the stop began, then give up with one line
(``whos_online.flushing.schedule``). Time is the test's: a pause between two tries moves the clock
on, and Redis times out every write until the stall is over on that clock."""

from __future__ import annotations

import logging
import os
import signal
import time
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
import redis
from asgiref.sync import async_to_sync
from django.test import AsyncClient, Client

import whos_online
from tests.support.helpers import BreakerClock, configure, members
from whos_online.backend import connection
from whos_online.config import process
from whos_online.config.settings import get_config
from whos_online.flushing import batches, schedule, stopping
from whos_online.flushing import flusher as flushing
from whos_online.flushing.queue import Job
from whos_online.recording import throttle
from whos_online.recording import visits as recording
from whos_online.store import scripts

if TYPE_CHECKING:
    from whos_online.backend.clients import Client as RedisClient
    from whos_online.config.settings import Config


COOKIE = throttle.COOKIE_NAME


class Stall:
    """Redis times out every write (a script's, a job's) until ``ends`` on ``clock``; counts the
    writes tried."""

    def __init__(self, clock: BreakerClock) -> None:
        self.clock = clock
        self.ends = float("inf")
        self.tries = 0

    def lasting(self, seconds: float) -> None:
        self.ends = self.clock() + seconds

    def write(self) -> None:
        self.tries += 1
        if self.clock() < self.ends:
            raise redis.exceptions.TimeoutError("Timeout reading from socket")


@pytest.fixture
def clock(monkeypatch, breaker_clock: BreakerClock) -> BreakerClock:
    """One monotonic clock for the stop, its tries and pauses, and the breakers."""
    moved = SimpleNamespace(monotonic=breaker_clock, sleep=breaker_clock.advance)
    for module in (process, schedule, stopping):
        monkeypatch.setattr(module, "time", moved)
    return breaker_clock


@pytest.fixture
def stall(clock, monkeypatch) -> Stall:
    stalled = Stall(clock)
    run = scripts.run

    def write(client: RedisClient, calls: Any) -> Any:
        stalled.write()
        return run(client, calls)

    monkeypatch.setattr(scripts, "run", write)
    return stalled


@pytest.fixture
def held(settings, backend) -> None:
    """Visits wait in the queue (the thread would wait 10 s), page hits are counted, and the
    breaker would keep Redis off for 10 s after a failure; on fakeredis, and on a real Redis."""
    configure(settings, FLUSH_INTERVAL=10, COUNT_HITS=True, FAILURE_BACKOFF=10)


def hits_counted() -> int:
    return sum(count for _, count in whos_online.get_counter("hits", 86400))


def hold(*guests: str) -> None:
    """A page hit counted, and a visit queued for each guest."""
    recording.count_hit()
    for guest in guests:
        flushing.current().put(recording.member_visit("guests", guest, time.time()))


def losses(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if "gives up" in record.msg]


# Trying again


def test_a_stop_s_write_goes_on_through_a_stall_past_the_open_breaker(
    r, held, clock, stall, caplog
):
    hold("m")
    process.stop_soon()
    began = clock()
    stall.lasting(0.9)
    target = get_config().redis_target

    failed = flushing.current().flush()

    assert failed == frozenset()
    assert members(r, "guests") == ["m"]
    assert hits_counted() == 1
    # A try at once, which failed (the breaker then refuses calls for FAILURE_BACKOFF), and one
    # every RETRY_PAUSE past it, until the stall was over.
    assert stall.tries == 1 + 5
    assert clock() - began == pytest.approx(1.0)
    assert not connection.known_to_fail(get_config(), None, writes=True)
    assert connection.breaker().allows(target)
    warnings = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert len(warnings) <= 1  # the breaker's, for the stall


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_writes_of_requests_finished_after_the_signal_go_on_through_a_stall(
    held, clock, stall, mode
):
    """The requests a server finishes during its shutdown write before they answer, a recorded
    visit as a throttled page's hit: through a stall too, since the process may end as soon as
    they have answered (uvicorn's workers)."""
    process.stop_soon()
    if mode == "sync":
        browser: Any = Client(REMOTE_ADDR="198.51.100.7")
        get, path = browser.get, "/plain/"
    else:
        browser = AsyncClient(REMOTE_ADDR="198.51.100.7")
        get, path = async_to_sync(browser.get), "/async/"

    stall.lasting(0.5)
    first = get(path)  # recorded
    assert whos_online.online_counts().guests == 1
    assert hits_counted() == 1
    stall.lasting(0.5)
    second = get(path)  # throttled: its hit only

    assert (first.status_code, second.status_code) == (200, 200)
    assert COOKIE in first.cookies
    assert COOKIE not in second.cookies
    assert hits_counted() == 2


def test_the_exit_write_goes_on_through_a_stall(r, held, clock, stall, caplog):
    """gunicorn's workers exit through ``sys.exit``: ``atexit`` writes (``Flusher.close``)."""
    hold("m", "n")
    stall.lasting(2.0)

    flushing.write_at_exit()

    assert members(r, "guests") == ["m", "n"]
    assert hits_counted() == 1
    assert losses(caplog) == []


def test_the_handler_s_write_goes_on_through_a_stall_before_it_hands_the_signal_on(
    r, held, clock, stall
):
    forwarded: list[int] = []
    handler = stopping.WriteThenHandOn(lambda signum, frame: forwarded.append(signum))
    before = signal.signal(signal.SIGTERM, handler)
    hold("m")
    stall.lasting(1.5)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
    finally:
        signal.signal(signal.SIGTERM, before)

    assert forwarded == [signal.SIGTERM]
    assert stall.tries > 1
    assert members(r, "guests") == ["m"]


# Giving up


def test_a_stall_that_outlasts_stop_timeout_is_given_up_with_one_line(
    settings, held, clock, stall, caplog
):
    configure(settings, STOP_TIMEOUT=1)
    hold("m", "n")

    def logout(client: RedisClient, config: Config) -> None:
        stall.write()

    flushing.current().add_job(Job(logout))
    process.stop_soon()
    began = clock()

    failed = flushing.current().flush()  # the handler's, or a request's

    assert failed
    assert clock() - began == pytest.approx(1.0)
    assert losses(caplog) == [
        "whos_online could not write to Redis within STOP_TIMEOUT (1 s) of the process's stop "
        "and gives up: 2 visits, 1 page hits and 1 writes of logouts it holds are not written."
    ]
    tries = stall.tries
    flushing.write_at_exit()  # past the deadline: one try, which the open breaker holds back
    assert stall.tries == tries
    assert len(losses(caplog)) == 1  # said once
    assert len(flushing.current().queue) == 2
    assert batches.buffer().total() == 1


def test_with_stop_timeout_0_the_exit_write_tries_once(settings, held, clock, stall, caplog):
    configure(settings, STOP_TIMEOUT=0)
    hold("m")

    flushing.write_at_exit()

    assert stall.tries == 1
    assert len(losses(caplog)) == 1


def test_past_the_deadline_a_write_tries_once(held, clock, stall, caplog):
    hold("m")
    process.stop_soon()
    clock.advance(5.0)  # STOP_TIMEOUT's default

    assert flushing.current().flush()

    assert stall.tries == 1
    assert len(losses(caplog)) == 1


def test_past_the_deadline_the_breakers_have_their_say(held, clock, stall):
    hold("m")
    for _ in range(3):  # an outage, whatever the breaker's rule
        connection.breaker().failed(get_config().redis_target, ConnectionError("refused"), 10)
    process.stop_soon()
    clock.advance(5.0)
    stall.lasting(0)  # Redis would answer

    assert flushing.current().flush()

    assert stall.tries == 0
    assert len(flushing.current().queue) == 1


# The retry loop, and the handler's wait


def test_write_until_tries_past_the_breakers_pausing_between_tries(clock):
    passed: list[bool] = []
    told: list[float] = []
    outcomes = [frozenset({"a"}), frozenset({"a"}), frozenset()]

    def attempt() -> frozenset[str]:
        passed.append(connection.breakers_passed())
        return outcomes.pop(0)

    start = clock()
    failed = schedule.write_until(attempt, start + 5, told.append)

    assert failed == frozenset()
    assert passed == [True, True, True]
    assert told == [start + 5] * 2
    assert clock() - start == pytest.approx(2 * schedule.RETRY_PAUSE)
    assert not connection.breakers_passed()


def test_write_until_makes_its_last_pause_what_is_left(clock):
    tried_at: list[float] = []

    def attempt() -> frozenset[str]:
        tried_at.append(clock())
        return frozenset({"a"})

    start = clock()
    assert schedule.write_until(attempt, start + 0.5) == frozenset({"a"})

    assert [at - start for at in tried_at] == pytest.approx([0, 0.2, 0.4, 0.5])


def test_write_until_past_its_deadline_tries_once_within_the_breakers(clock):
    passed: list[bool] = []

    def attempt() -> frozenset[str]:
        passed.append(connection.breakers_passed())
        return frozenset({"a"})

    assert schedule.write_until(attempt, clock()) == frozenset({"a"})
    assert passed == [False]


class Writer:
    """Stands for the handler's writer thread: alive throughout; notes how long it was
    waited for, and after the first wait, may say that it tries again until ``until``."""

    def __init__(self, made: Any, until: float | None) -> None:
        self.made = made
        self.until = until
        self.waits: list[float | None] = []

    def join(self, timeout: float | None = None) -> None:
        self.waits.append(timeout)
        self.made.retrying_until = self.until

    def is_alive(self) -> bool:
        return True


def test_the_handler_waits_for_a_write_that_tries_again_until_its_deadline(clock):
    made = SimpleNamespace(retrying_until=None)
    writer = Writer(made, until=clock() + 3.0)

    stopping.wait_for(writer, made)  # type: ignore [arg-type]

    assert writer.waits == [flushing.EXIT_WAIT, 3.0 + flushing.EXIT_WAIT]


def test_the_handler_waits_no_longer_for_a_write_that_has_not_tried_yet(clock):
    """A write that has not tried once within EXIT_WAIT may wait for a lock that this thread,
    which the signal interrupted, holds: it goes on once the handler has returned."""
    made = SimpleNamespace(retrying_until=None)
    writer = Writer(made, until=None)

    stopping.wait_for(writer, made)  # type: ignore [arg-type]

    assert writer.waits == [flushing.EXIT_WAIT]
