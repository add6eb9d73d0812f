"""A live stream's request lets go of its thread (``whos_online.live.resources``) only
when that thread is the request's own: in a thread-sensitive context of its own, as Django's ASGI
handler gives each request, and never one that a sync caller above, or the context's caller,
owns. (The stream itself: ``tests/test_stream.py``.)"""

from __future__ import annotations

import asyncio
import logging
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from asgiref.sync import ThreadSensitiveContext, async_to_sync, sync_to_async
from django import db as django_db

from whos_online.live import resources


def on_own_thread(monkeypatch: pytest.MonkeyPatch, close_all: object) -> tuple[bool, str, bool]:
    """Let go from a context of its own, after a sync call made its thread: what ``let_go``
    answered, the name of the thread that ran its sync call, and whether that thread ended."""
    monkeypatch.setattr(django_db.connections, "close_all", close_all)

    async def scenario() -> tuple[bool, threading.Thread]:
        async with ThreadSensitiveContext():
            thread = await sync_to_async(threading.current_thread)()
            return resources.let_go(), thread

    let_go, thread = asyncio.run(scenario())
    thread.join(5)
    return let_go, thread.name, not thread.is_alive()


def test_a_request_s_own_thread_closes_its_connections_and_ends(monkeypatch):
    closed_on: list[str] = []

    let_go, name, ended = on_own_thread(
        monkeypatch, lambda: closed_on.append(threading.current_thread().name)
    )

    assert let_go
    assert closed_on == [name]
    assert ended


def test_what_the_request_runs_afterwards_runs_on_one_thread_and_its_end_starts_none(
    monkeypatch,
):
    """Django closes a stream's response on its request's thread as the stream ends: once the
    request has let go of its own, that runs on the process's one ``Afterwards`` thread, and
    the end of the request's context starts no thread (asgiref would start one to run the close
    and another to join it, for each stream)."""
    monkeypatch.setattr(django_db.connections, "close_all", lambda: None)
    started: list[str] = []
    start = threading.Thread.start

    def counted(thread: threading.Thread) -> None:
        started.append(thread.name)
        start(thread)

    async def stream_like() -> str:
        async with ThreadSensitiveContext():
            await sync_to_async(threading.current_thread)()
            resources.let_go()
            threading.Thread.start = counted  # type: ignore [method-assign, assignment]
            later = await sync_to_async(threading.current_thread)()
        threading.Thread.start = start  # type: ignore [method-assign]
        return later.name

    async def scenario() -> list[str]:
        return [await stream_like() for _ in range(3)]

    try:
        names = asyncio.run(scenario())
    finally:
        threading.Thread.start = start  # type: ignore [method-assign]

    assert len(set(names)) == 1
    assert names[0].startswith("whos_online-streams")
    assert started == names[:1] or started == []  # its one thread, if it was not running yet


def test_a_connection_that_fails_to_close_is_logged_and_the_thread_ends(monkeypatch, caplog):
    def close_all() -> None:
        raise django_db.OperationalError("server closed the connection unexpectedly")

    with caplog.at_level(logging.ERROR, "whos_online"):
        let_go, _name, ended = on_own_thread(monkeypatch, close_all)

    assert let_go
    assert ended
    assert [record.getMessage() for record in caplog.records] == [
        "Closing the database connections of a live stream's thread failed."
    ]


def test_under_a_sync_caller_the_thread_is_left_alone():
    """A sync caller above runs the request's sync code on its own thread, which is busy
    waiting for this very call: taking it would make the connections' close wait for ever."""

    async def let_go() -> bool:
        return resources.let_go()

    async def scenario() -> bool:
        async with ThreadSensitiveContext():
            return await sync_to_async(async_to_sync(let_go))()

    assert asyncio.run(asyncio.wait_for(scenario(), 10)) is False


@pytest.mark.skipif(
    not resources._CALLERS_MAY_OWN_EXECUTORS, reason="asgiref gives no context an executor"
)
def test_an_executor_the_context_s_caller_owns_is_left_alone():
    executor = ThreadPoolExecutor(max_workers=1)

    async def scenario() -> bool:
        async with ThreadSensitiveContext(executor=executor):  # type: ignore [call-arg, unused-ignore]
            await sync_to_async(threading.current_thread)()
            return resources.let_go()

    try:
        assert asyncio.run(scenario()) is False
        assert executor.submit(lambda: 7).result(5) == 7
    finally:
        executor.shutdown()


def test_outside_any_request_there_is_nothing_to_let_go():
    async def scenario() -> bool:
        return resources.let_go()

    assert asyncio.run(scenario()) is False
