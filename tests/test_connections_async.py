"""The async API: what async code (a Channels consumer, an async view) calls, never holding its
event loop while Redis answers, slowly or not at all."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, TypeVar

import pytest
import redis
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model

import whos_online
from tests.conftest import SCRIPTS
from tests.support.delaying_proxy import DelayingProxy
from tests.support.helpers import configure
from whos_online.backend import clients

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterator

    from django.contrib.auth.models import AbstractUser

T = TypeVar("T")

CHAT = "chat:lobby"
#: How long the proxy holds each reply: slow, within the request timeout (0.25 s).
SLOW = 0.15


def loop_turns_during(call: Callable[[], Awaitable[T]]) -> tuple[T, int]:
    """What ``call`` returns, and how many times a task that only sleeps 5 ms at a time ran on
    the same event loop meanwhile: none if ``call`` held the loop. Run as async_to_sync runs a
    consumer: a thread-sensitive call goes back to this thread (and its database connection)."""

    async def scenario() -> tuple[T, int]:
        turns = 0

        async def ticker() -> None:
            nonlocal turns
            while True:
                await asyncio.sleep(0.005)
                turns += 1

        ticking = asyncio.create_task(ticker())
        await asyncio.sleep(0.02)
        before = turns
        try:
            found = await call()
        finally:
            ticking.cancel()
        return found, turns - before

    return async_to_sync(scenario)()


@pytest.fixture
def slow_redis(real_redis_url, settings, monkeypatch) -> Iterator[DelayingProxy]:
    """The app's Redis behind a proxy that holds every reply back ``SLOW`` seconds, with each
    write of the async API made at once (``FLUSH_INTERVAL`` 0, as the test settings have it).
    The request client's timeout is raised well above ``SLOW``: slow, not failing, is what these
    tests are about, and on a busy machine ``SLOW`` plus a scheduling delay outlasted 0.25 s."""
    monkeypatch.setattr(clients, "REQUEST_TIMEOUT", 2.0)
    direct = redis.Redis.from_url(real_redis_url)
    direct.flushdb()
    for source in SCRIPTS:
        direct.script_load(source)
    proxy = DelayingProxy(int(real_redis_url.rsplit(":", 1)[1].split("/")[0]))
    configure(settings, REDIS_URL=proxy.url)
    whos_online.online_counts()  # a pooled connection, set up before the stall
    proxy.delay = SLOW
    yield proxy
    proxy.close()


def test_aenter_and_aleave_let_the_loop_run_while_redis_is_slow(slow_redis, alice):
    entered, turns_entering = loop_turns_during(
        lambda: whos_online.aenter(CHAT, user=alice, connection="socket")
    )
    counts, turns_reading = loop_turns_during(lambda: whos_online.aonline_counts(room=CHAT))
    left, turns_leaving = loop_turns_during(
        lambda: whos_online.aleave(CHAT, user=alice, connection="socket")
    )

    assert entered
    assert left
    assert counts.users == 1
    # Each waited SLOW seconds for Redis, with the loop free: a held loop turns no time at all.
    assert turns_entering >= 3
    assert turns_reading >= 3
    assert turns_leaving >= 3
    assert whos_online.online_counts(room=CHAT).users == 0


def test_every_async_read_lets_the_loop_run_while_redis_is_slow(slow_redis, alice):
    whos_online.enter(CHAT, user=alice, connection="socket")
    reads: dict[str, Callable[[], Awaitable[Any]]] = {
        "aonline_users": lambda: whos_online.aonline_users(room=CHAT),
        "ais_online": lambda: whos_online.ais_online(alice),
        "alast_seen": lambda: whos_online.alast_seen(alice),
        "apresence": lambda: whos_online.apresence([alice]),
    }

    for name, read in reads.items():
        _, turns = loop_turns_during(read)
        assert turns >= 3, name


def test_aflush_writes_the_queue_letting_the_loop_run(slow_redis, settings, alice):
    configure(settings, REDIS_URL=slow_redis.url, FLUSH_INTERVAL=10)
    whos_online.enter(CHAT, user=alice, connection="socket")  # queued

    written, turns = loop_turns_during(whos_online.aflush)

    assert written
    assert turns >= 3


def test_async_reads_answer_as_the_sync_ones(backend, alice):
    async def read() -> tuple[Any, ...]:
        await whos_online.aenter(CHAT, user=alice, connection="socket")
        return (
            [user.name for user in await whos_online.aonline_users(room=CHAT)],
            await whos_online.aonline_counts(room=CHAT),
            await whos_online.ais_online(alice),
            await whos_online.alast_seen(alice) is not None,
            (await whos_online.apresence([alice.pk]))[alice.pk].online,
        )

    names, counts, online, seen, present = async_to_sync(read)()

    assert names == ["alice"]
    assert counts.users == counts.total == 1
    assert online
    assert seen
    assert present


def test_aenter_queues_without_waiting_on_redis(backend, settings, alice, redis_calls):
    configure(settings, FLUSH_INTERVAL=10)  # the flushing thread writes it, ten seconds on

    async def enter() -> bool:
        return await whos_online.aenter(CHAT, user=alice, connection="socket")

    assert async_to_sync(enter)()
    assert redis_calls.trips == []
    assert whos_online.online_counts(room=CHAT).users == 1  # a read writes the queue first


def hide_if_named_bob_in_the_database(user: AbstractUser) -> bool:
    """A HIDE_USER that reads the database, which an event loop may not do."""
    return get_user_model().objects.filter(pk=user.pk, username="bob").exists()


def test_aenter_runs_a_hide_user_that_reads_the_database_in_a_thread(backend, settings, bob):
    configure(
        settings,
        HIDE_USER="tests.test_connections_async.hide_if_named_bob_in_the_database",
    )

    async def enter() -> bool:
        return await whos_online.aenter(CHAT, user=bob, connection="socket")

    assert async_to_sync(enter)()
    assert whos_online.online_counts(room=CHAT).users == 1
    assert whos_online.online_users(room=CHAT) == []  # hidden
