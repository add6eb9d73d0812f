"""The middleware on an ASGI stack (Django's AsyncClient through the test settings' middleware):
visits queued from the event loop, which never waits on Redis for them, the user loaded with
``request.auser()``.

The same stack through a real ASGI server is tests/test_load.py's uvicorn run."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

import whos_online
from tests.support.helpers import configure, guest, log_in_quietly, members
from whos_online.recording import requests, throttle

COOKIE = throttle.COOKIE_NAME


def get(client: AsyncClient, path: str = "/async/") -> Any:
    return async_to_sync(client.get)(path)


@pytest.fixture
def queued(settings, monkeypatch) -> None:
    """Visits are queued (FLUSH_INTERVAL), and recording must not leave the event loop."""
    configure(settings, FLUSH_INTERVAL=10)

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("recorded through sync_to_async")

    monkeypatch.setattr(requests, "sync_to_async", refuse)


def test_a_guest_is_queued_on_the_event_loop(r, queued, redis_calls):
    response = get(AsyncClient())

    assert response.status_code == 200
    assert COOKIE in response.cookies
    assert redis_calls.trips == []
    assert whos_online.flush() is True
    assert members(r, "guests") == [guest("127.0.0.1")]  # AsyncClient's address


def test_a_user_is_loaded_with_auser_and_queued(r, alice, queued):
    browser = AsyncClient()
    log_in_quietly(browser, alice)

    response = get(browser)

    assert COOKIE in response.cookies
    # The process reads what it queued: the read writes its queue first.
    assert [user.name for user in whos_online.online_users()] == ["alice"]
    assert members(r, "guests") == []


def test_a_display_name_that_reads_the_database_still_works(r, settings, alice):
    """Sync-only code of the site's (here DISPLAY_NAME querying the user table) runs in a
    thread rather than failing on the event loop."""
    from django.contrib.auth import get_user_model

    def from_database(user: Any) -> str:
        return f"{get_user_model().objects.get(pk=user.pk).username} (db)"

    configure(settings, DISPLAY_NAME=from_database)
    browser = AsyncClient()
    log_in_quietly(browser, alice)

    get(browser)

    assert [user.name for user in whos_online.online_users()] == ["alice (db)"]


def test_redis_down_fails_open_with_one_warning(redis_down, caplog):
    with caplog.at_level(logging.WARNING, logger="whos_online"):
        for _ in range(2):
            response = get(AsyncClient())
            assert response.status_code == 200
            assert COOKIE not in response.cookies
    assert len([r for r in caplog.records if r.name == "whos_online"]) == 1


def test_after_a_redis_restart_the_next_flush_gets_a_live_connection(settings, caplog):
    """The pool holds several connections to a Redis that is killed and started again: the next
    flushes get live ones, so no warning, and the breaker stays closed
    (tests/backend/test_restarts.py does the same through uvicorn and gunicorn)."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.support.redis_server import RedisServer
    from whos_online.backend.clients import request_client

    server = RedisServer()
    server.start()
    configure(settings, REDIS_URL=server.url)

    def record_guests(first: int) -> list[bool]:
        addresses = [f"198.51.100.{first + n}" for n in range(6)]
        with ThreadPoolExecutor(6) as pool:
            return list(pool.map(whos_online.record_guest, addresses))

    def read_at_once() -> None:
        with ThreadPoolExecutor(6) as pool:
            list(pool.map(lambda _n: whos_online.peak(), range(12)))

    try:
        with caplog.at_level(logging.INFO, logger="whos_online"):
            assert record_guests(1) == [True] * 6
            read_at_once()  # several connections in the pool
            pool = request_client().connection_pool  # type: ignore [union-attr]
            pooled = len(pool._available_connections)
            assert server.process is not None
            server.process.kill()
            server.process.wait(timeout=5)
            server.start()  # the same port, a new process
            after = record_guests(11)
            read_at_once()
    finally:
        server.close()

    assert pooled > 1
    assert after == [True] * 6
    assert [r for r in caplog.records if r.name == "whos_online"] == []
