"""The circuit breaker on its own: back-off, one log line per outage, generations, and
timeouts that are strikes rather than outages."""

from __future__ import annotations

import asyncio
import logging

import pytest
import redis

from whos_online.backend.connection import CircuitBreaker, timed_out

TARGET = "redis://127.0.0.1:1/0"
OTHER = "cache alias 'default'"


def levels(caplog) -> list[str]:
    return [record.levelname for record in caplog.records if record.name == "whos_online"]


def test_a_failure_opens_the_breaker_for_the_backoff_only(breaker_clock):
    breaker = CircuitBreaker()
    assert breaker.allows(TARGET)

    breaker.failed(TARGET, ConnectionError("refused"), backoff=10)

    assert not breaker.allows(TARGET)
    assert breaker.allows(OTHER)
    breaker_clock.advance(9.99)
    assert not breaker.allows(TARGET)
    breaker_clock.advance(0.01)
    assert breaker.allows(TARGET)


def test_one_warning_per_outage_and_one_info_on_recovery(breaker_clock, caplog):
    caplog.set_level(logging.INFO, logger="whos_online")
    breaker = CircuitBreaker()
    for _ in range(3):
        generation = breaker.generation(TARGET)
        breaker.failed(TARGET, TimeoutError("timed out"), backoff=10)
        breaker_clock.advance(10)
    breaker.succeeded(TARGET, breaker.generation(TARGET))
    breaker.succeeded(TARGET, breaker.generation(TARGET))

    assert levels(caplog) == ["WARNING", "INFO"]
    assert "timed out" in caplog.records[0].getMessage()
    assert generation == 2


def test_a_reply_to_a_call_begun_before_the_failure_is_no_recovery(breaker_clock, caplog):
    caplog.set_level(logging.INFO, logger="whos_online")
    breaker = CircuitBreaker()
    before = breaker.generation(TARGET)
    breaker.failed(TARGET, ConnectionError("refused"), backoff=10)

    breaker.succeeded(TARGET, before)

    assert not breaker.allows(TARGET)
    assert levels(caplog) == ["WARNING"]
    breaker_clock.advance(10)
    breaker.succeeded(TARGET, breaker.generation(TARGET))
    assert levels(caplog) == ["WARNING", "INFO"]
    assert breaker.allows(TARGET)


def test_success_while_healthy_logs_nothing(caplog):
    caplog.set_level(logging.INFO, logger="whos_online")
    breaker = CircuitBreaker()
    breaker.succeeded(TARGET, breaker.generation(TARGET))
    assert levels(caplog) == []
    assert breaker.allows(TARGET)


def test_reset_closes_the_breaker_and_forgets_the_outage(caplog):
    caplog.set_level(logging.INFO, logger="whos_online")
    breaker = CircuitBreaker()
    breaker.failed(TARGET, ConnectionError("refused"), backoff=10)

    breaker.reset()

    assert breaker.allows(TARGET)
    assert breaker.generation(TARGET) == 0
    breaker.failed(TARGET, ConnectionError("refused"), backoff=10)
    assert levels(caplog) == ["WARNING", "WARNING"]


# A timeout is a strike; an outage opens the breaker

READ_TIMEOUT = redis.exceptions.TimeoutError("Timeout reading from socket")


@pytest.mark.parametrize(
    "error",
    [
        READ_TIMEOUT,
        redis.exceptions.TimeoutError("Timeout connecting to server"),
        TimeoutError("no answer to a ping"),
        asyncio.TimeoutError(),
    ],
    ids=["read", "connect", "builtin", "asyncio"],
)
def test_one_timeout_does_not_open_the_breaker(breaker_clock, caplog, error):
    caplog.set_level(logging.INFO, logger="whos_online")
    breaker = CircuitBreaker()

    breaker.failed(TARGET, error, backoff=10)

    assert timed_out(error)
    assert breaker.allows(TARGET)
    assert not breaker.is_down(TARGET)
    assert levels(caplog) == []


@pytest.mark.parametrize(
    "error",
    [
        redis.exceptions.ConnectionError(
            "Error 111 connecting to 127.0.0.1:1. Connection refused."
        ),
        redis.exceptions.ConnectionError("Connection closed by server."),
        redis.exceptions.ConnectionError("Error -2 connecting to nowhere:6379. Name unknown."),
        ConnectionResetError(104, "Connection reset by peer"),
        redis.exceptions.BusyLoadingError("Redis is loading the dataset in memory"),
    ],
    ids=["refused", "closed", "dns", "reset", "loading"],
)
def test_a_lost_connection_opens_the_breaker_at_once(breaker_clock, caplog, error):
    breaker = CircuitBreaker()

    breaker.failed(TARGET, error, backoff=10)

    assert not timed_out(error)
    assert not breaker.allows(TARGET)
    assert breaker.is_down(TARGET)
    assert levels(caplog) == ["WARNING"]


@pytest.mark.parametrize(
    "second", [READ_TIMEOUT, redis.exceptions.ConnectionError("refused")], ids=["timeout", "lost"]
)
def test_a_failure_after_a_timeout_within_the_backoff_opens_it_with_one_warning(
    breaker_clock, caplog, second
):
    breaker = CircuitBreaker()
    breaker.failed(TARGET, READ_TIMEOUT, backoff=10)
    breaker_clock.advance(9.9)

    breaker.failed(TARGET, second, backoff=10)

    assert not breaker.allows(TARGET)
    assert levels(caplog) == ["WARNING"]
    assert str(second) in caplog.records[0].getMessage()
    breaker_clock.advance(9.99)
    assert not breaker.allows(TARGET)  # the back-off counts from the failure that opened it
    breaker_clock.advance(0.01)
    assert breaker.allows(TARGET)


def test_a_frozen_server_costs_two_timeouts_then_one_per_backoff(breaker_clock, caplog):
    breaker = CircuitBreaker()
    timeouts = 0
    for _tick in range(int(60 / 0.5)):  # a call every half second for a minute
        if breaker.allows(TARGET):
            breaker.failed(TARGET, READ_TIMEOUT, backoff=10)
            timeouts += 1
        breaker_clock.advance(0.5)

    assert timeouts == 2 + 5  # the first two, then one as each back-off of 10 s ends
    assert levels(caplog) == ["WARNING"]


def test_a_success_between_two_timeouts_wipes_out_the_strike(breaker_clock, caplog):
    breaker = CircuitBreaker()
    breaker.failed(TARGET, READ_TIMEOUT, backoff=10)
    breaker_clock.advance(1)
    breaker.succeeded(TARGET, breaker.generation(TARGET))
    breaker_clock.advance(1)

    breaker.failed(TARGET, READ_TIMEOUT, backoff=10)

    assert breaker.allows(TARGET)
    assert levels(caplog) == []


def test_a_reply_to_a_call_begun_before_the_timeout_does_not_wipe_it_out(breaker_clock, caplog):
    breaker = CircuitBreaker()
    before = breaker.generation(TARGET)
    breaker.failed(TARGET, READ_TIMEOUT, backoff=10)
    breaker.succeeded(TARGET, before)

    breaker.failed(TARGET, READ_TIMEOUT, backoff=10)

    assert not breaker.allows(TARGET)
    assert levels(caplog) == ["WARNING"]


def test_a_strike_lapses_after_the_backoff(breaker_clock, caplog):
    breaker = CircuitBreaker()
    breaker.failed(TARGET, READ_TIMEOUT, backoff=10)
    breaker_clock.advance(10.01)

    breaker.failed(TARGET, READ_TIMEOUT, backoff=10)

    assert breaker.allows(TARGET)
    assert levels(caplog) == []


def test_a_strike_may_stand_longer_than_the_backoff_it_would_open(breaker_clock, caplog):
    """The subscription waits a short, growing back-off of its own between attempts; a strike
    stands for FAILURE_BACKOFF all the same, so that its second timeout in a row opens it."""
    breaker = CircuitBreaker()
    breaker.failed(TARGET, READ_TIMEOUT, backoff=0.5, window=10)
    breaker_clock.advance(2.5)

    breaker.failed(TARGET, READ_TIMEOUT, backoff=1, window=10)

    assert breaker.is_down(TARGET)
    assert levels(caplog) == ["WARNING"]


def test_without_a_backoff_two_timeouts_in_a_row_are_still_an_outage(breaker_clock, caplog):
    """FAILURE_BACKOFF 0 tries Redis on every call; a frozen server is still logged, once."""
    breaker = CircuitBreaker()
    for _ in range(5):
        assert breaker.allows(TARGET)
        breaker.failed(TARGET, READ_TIMEOUT, backoff=0)
        breaker_clock.advance(0.25)

    assert breaker.is_down(TARGET)
    assert levels(caplog) == ["WARNING"]


def test_timeouts_strike_each_target_apart(breaker_clock):
    breaker = CircuitBreaker()
    breaker.failed(TARGET, READ_TIMEOUT, backoff=10)

    breaker.failed(OTHER, READ_TIMEOUT, backoff=10)

    assert breaker.allows(TARGET)
    assert breaker.allows(OTHER)


def test_reset_forgets_a_strike(breaker_clock):
    breaker = CircuitBreaker()
    breaker.failed(TARGET, READ_TIMEOUT, backoff=10)

    breaker.reset()
    breaker.failed(TARGET, READ_TIMEOUT, backoff=10)

    assert breaker.allows(TARGET)
