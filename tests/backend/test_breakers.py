"""The circuit breaker on its own: back-off, one log line per outage, and generations."""

from __future__ import annotations

import logging

from whos_online.backend.breakers import CircuitBreaker

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
