"""What one live stream has to send next (``whos_online.live.streaming``): the newest state only,
``stale`` and ``end`` as flags, the heartbeat and the end that the hub's tick brings, and the
cancellation of a stream whose send does not complete. Times are given (``now=``), never waited
for. (The stream itself, through Django's ASGI handler: ``tests/test_stream_bounds.py``.)"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

import pytest

from whos_online.live.outbox import END, END_GRACE, HEARTBEAT, SEND_BOUND, STALE, Outbox

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

NOW = 1_700_000_000.0
HOUR = 3600.0


def run(scenario: Callable[[], Awaitable[Any]]) -> Any:
    return asyncio.run(scenario())  # type: ignore [arg-type]


async def taken(outbox: Outbox) -> list[str]:
    """What ``next`` gives at once, until it would wait."""
    found: list[str] = []
    while True:
        waiting = asyncio.ensure_future(outbox.next())
        await asyncio.sleep(0)
        if not waiting.done():
            waiting.cancel()
            return found
        found.append(waiting.result())
        if found[-1] == END:
            return found


def test_a_newer_state_replaces_one_not_sent():
    async def scenario() -> list[str]:
        outbox = Outbox(NOW + HOUR)
        for number in range(100):
            outbox.offer(f"data: {number}\n\n")
        return await taken(outbox)

    assert run(scenario) == ["data: 99\n\n"]


def test_stale_follows_the_state_waiting_and_a_newer_state_takes_it_back():
    async def scenario() -> tuple[list[str], list[str]]:
        outbox = Outbox(NOW + HOUR)
        outbox.offer("data: 1\n\n")
        outbox.stale()
        outbox.stale()
        first = await taken(outbox)
        outbox.stale()
        outbox.offer("data: 2\n\n")  # read again: Redis is back
        return first, await taken(outbox)

    assert run(scenario) == (["data: 1\n\n", STALE], ["data: 2\n\n"])


def test_end_drops_what_waits_and_nothing_follows_it():
    async def scenario() -> list[str]:
        outbox = Outbox(NOW + HOUR)
        outbox.offer("data: 1\n\n")
        outbox.stale()
        outbox.end()
        outbox.offer("data: 2\n\n")
        outbox.stale()
        return await taken(outbox)

    assert run(scenario) == [END]


def test_the_tick_sends_a_heartbeat_after_a_silence_only():
    async def scenario() -> list[list[str]]:
        outbox = Outbox(time.time() + HOUR)
        before = time.time()
        seen = [await taken(outbox)]  # quiet since then
        assert outbox.tick(before + HEARTBEAT - 1)
        seen.append(await taken(outbox))
        outbox.tick(time.time() + HEARTBEAT)
        seen.append(await taken(outbox))
        return seen

    assert run(scenario) == [[], [], [": still here\n\n"]]


def test_the_tick_ends_a_stream_at_its_end_time():
    async def scenario() -> list[str]:
        outbox = Outbox(NOW + HOUR, now=NOW)
        outbox.offer("data: 1\n\n")
        outbox.tick(NOW + HOUR)
        return await taken(outbox)

    assert run(scenario) == [END]


async def consumer(outbox: Outbox, read: asyncio.Event) -> None:
    """A stream's generator and its server, whose ``send`` waits until ``read`` is set."""
    outbox.begin("first")
    await read.wait()
    while (await outbox.next()) != END:
        await read.wait()


@pytest.mark.parametrize(
    ("wait", "cancelled"),
    [(SEND_BOUND - 1, False), (SEND_BOUND, True)],
    ids=["within-the-bound", "at-the-bound"],
)
def test_a_send_that_does_not_complete_within_the_bound_is_cancelled(wait, cancelled):
    async def scenario() -> tuple[bool, bool]:
        outbox = Outbox(time.time() + HOUR)
        task = asyncio.ensure_future(consumer(outbox, asyncio.Event()))
        await asyncio.sleep(0)  # handed its first event out, and waits for the send
        alive = outbox.tick(time.time() + wait)
        await asyncio.sleep(0)
        done = task.done()
        task.cancel()
        return alive, done

    assert run(scenario) == (True, cancelled)


def test_an_end_that_cannot_be_sent_is_cancelled_after_a_grace():
    async def scenario() -> list[bool]:
        read = asyncio.Event()
        read.set()
        outbox = Outbox(time.time() + HOUR)
        task = asyncio.ensure_future(consumer(outbox, read))
        await asyncio.sleep(0)
        read.clear()  # the client stops reading: its next send waits
        outbox.offer("data: 1\n\n")
        await asyncio.sleep(0)
        now = time.time()
        outbox.end(now)
        seen = [outbox.tick(now + END_GRACE - 1)]
        await asyncio.sleep(0)
        seen.append(task.done())
        seen.append(outbox.tick(now + END_GRACE))
        await asyncio.sleep(0)
        seen.append(task.done())
        seen.append(outbox.tick(now + END_GRACE + 1))  # its task has ended
        return seen

    assert run(scenario) == [True, False, True, True, False]


def test_a_stream_that_reads_is_never_cancelled():
    async def scenario() -> bool:
        read = asyncio.Event()
        read.set()
        outbox = Outbox(time.time() + HOUR)
        task = asyncio.ensure_future(consumer(outbox, read))
        await asyncio.sleep(0)
        for _ in range(5):
            outbox.offer("data: 1\n\n")
            await asyncio.sleep(0)
            outbox.tick(time.time() + SEND_BOUND * 2)  # sent at once: no send under way
            await asyncio.sleep(0)
        done = task.done()
        task.cancel()
        return done

    assert run(scenario) is False


@pytest.mark.parametrize("turns", range(5))
def test_a_cancellation_in_any_turn_after_a_state_came_ends_the_generator(turns):
    """``asyncio.wait_for`` (Python 3.11) returns the item when the cancellation comes in the
    turn of the loop in which the item arrived: ``next`` waits on an event instead."""

    async def scenario() -> bool:
        read = asyncio.Event()
        read.set()
        outbox = Outbox(time.time() + HOUR)
        task = asyncio.ensure_future(consumer(outbox, read))
        await asyncio.sleep(0)
        outbox.offer("data: 1\n\n")
        for _ in range(turns):
            await asyncio.sleep(0)
        task.cancel()
        done, _ = await asyncio.wait([task], timeout=5)
        return task in done and task.cancelled()

    assert run(scenario) is True
