"""The middleware on an ASGI stack (Django's AsyncClient through the test settings' middleware):
visits recorded with redis-py's asyncio client, the user loaded with ``request.auser()``.

The same stack through a real ASGI server is tests/test_load.py's uvicorn run."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

import whos_online
from tests.helpers import configure, guest, log_in_quietly, members
from whos_online import recording, throttle

COOKIE = throttle.COOKIE_NAME


def get(client: AsyncClient, path: str = "/async/") -> Any:
    return async_to_sync(client.get)(path)


@pytest.fixture
def no_thread(monkeypatch) -> None:
    """Recording must not go through sync_to_async."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("recorded through sync_to_async")

    monkeypatch.setattr(recording, "sync_to_async", refuse)


def test_a_guest_is_recorded_with_the_asyncio_client(r, no_thread):
    response = get(AsyncClient())

    assert response.status_code == 200
    assert COOKIE in response.cookies
    assert members(r, "guests") == [guest("127.0.0.1")]  # AsyncClient's address


def test_a_user_is_loaded_with_auser_and_recorded(r, alice, no_thread):
    browser = AsyncClient()
    log_in_quietly(browser, alice)

    response = get(browser)

    assert COOKIE in response.cookies
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


def test_after_a_redis_restart_every_call_gets_a_live_connection(settings, caplog):
    """The asyncio pool holds several connections to a Redis that is killed and started again:
    not one call fails, so no warning, and the breaker stays closed (tests/test_restarts.py
    does the same through uvicorn)."""
    import asyncio

    import redis.asyncio

    from tests.redis_server import RedisServer
    from whos_online import aio

    server = RedisServer()
    server.start()
    configure(settings, REDIS_URL=server.url)

    async def pings(client: aio.AsyncClient, count: int) -> list[object]:
        async def ping(client: aio.AsyncClient, _config: object) -> object:
            return await client.ping()

        return list(await asyncio.gather(*(aio.call(None, client, ping) for _ in range(count))))

    async def scenario() -> tuple[int, list[object]]:
        client = aio.request_client()
        assert isinstance(client, redis.asyncio.Redis)
        assert await pings(client, 6) == [True] * 6
        pooled = len(client.connection_pool._available_connections)
        assert server.process is not None
        server.process.kill()
        server.process.wait(timeout=5)
        server.start()  # the same port, a new process
        await asyncio.sleep(0.1)  # the loop learns that the old connections were closed
        return pooled, await pings(client, 6)

    try:
        with caplog.at_level(logging.INFO, logger="whos_online"):
            pooled, after = asyncio.run(scenario())
    finally:
        server.close()

    assert pooled > 1
    assert after == [True] * 6
    assert [r for r in caplog.records if r.name == "whos_online"] == []
