"""A ``Line`` (a stream written straight to its connection) against a server's ``send`` faked
here: sent at once when the server takes it, the newest state only while a send waits, a wait
cut at its bound with the cancellation reaching the server's own ``send``, and a server that
refuses taken for a client gone. Through Django and ``LiveStreams``, tests/test_stream*.py."""

from __future__ import annotations

import asyncio
import contextvars
import time
from typing import Any

from whos_online.live import subscription
from whos_online.live.line import Line
from whos_online.live.outbox import END, HEARTBEAT, SEND_BOUND, STALE, STILL_HERE

HOUR = 3600.0


class Server:
    """A server's ``send``: it takes each message at once, or (``full``) waits until told."""

    def __init__(self) -> None:
        self.sent: list[str] = []
        self.full = False
        self.room = asyncio.Event()
        self.cancelled = 0

    async def send(self, message: dict[str, Any]) -> None:
        try:
            while self.full:
                self.room.clear()
                await self.room.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        self.sent.append(message["body"].decode() + ("" if message["more_body"] else "|"))


def run(scenario: Any) -> Any:
    return asyncio.run(scenario())


def test_each_event_is_sent_at_once_and_the_end_ends_the_response():
    async def scenario() -> tuple[list[str], bool | None]:
        server = Server()
        line = Line(server.send, time.time() + HOUR, asyncio.get_running_loop())
        line.offer("data: 1\n\n")
        line.stale()
        sent_at_once = list(server.sent)
        line.end()
        return sent_at_once + server.sent[2:], await line.over

    assert run(scenario) == (["data: 1\n\n", STALE, END + "|"], False)


def test_while_a_send_waits_only_the_newest_state_follows_then_the_stale():
    async def scenario() -> list[str]:
        server = Server()
        line = Line(server.send, time.time() + HOUR, asyncio.get_running_loop())
        server.full = True
        line.offer("data: 1\n\n")  # waits
        for number in range(2, 50):
            line.offer(f"data: {number}\n\n")
        line.stale()
        server.full = False
        server.room.set()
        for _ in range(10):
            await asyncio.sleep(0)
        return server.sent

    assert run(scenario) == ["data: 1\n\n", "data: 49\n\n", STALE]


def test_a_send_that_waits_past_the_bound_is_cancelled_in_the_server_s_send():
    async def scenario() -> tuple[bool, bool, bool | None, int]:
        server = Server()
        line = Line(server.send, time.time() + HOUR, asyncio.get_running_loop())
        server.full = True
        line.offer("data: 1\n\n")
        waited_since = time.time()
        await asyncio.sleep(0)  # its task under way
        kept = line.tick(waited_since + SEND_BOUND - 1)
        cut = line.tick(waited_since + SEND_BOUND)
        await asyncio.sleep(0)
        return kept, cut, await line.over, server.cancelled

    assert run(scenario) == (True, False, True, 1)


def test_a_server_that_refuses_is_a_client_gone():
    async def refuse(message: dict[str, Any]) -> None:
        raise OSError("gone")

    async def scenario() -> tuple[bool | None, bool]:
        line = Line(refuse, time.time() + HOUR, asyncio.get_running_loop())
        line.offer("data: 1\n\n")
        return await line.over, line.tick()

    assert run(scenario) == (False, False)


def test_a_send_that_is_not_a_coroutine_is_awaited_as_it_is():
    async def scenario() -> list[str]:
        sent: list[str] = []
        loop = asyncio.get_running_loop()

        def send(message: dict[str, Any]) -> asyncio.Future[None]:
            sent.append(message["body"].decode())
            done = loop.create_future()
            loop.call_soon(done.set_result, None)
            return done

        line = Line(send, time.time() + HOUR, loop)
        line.offer("data: 1\n\n")
        line.offer("data: 2\n\n")  # once the first is done
        for _ in range(5):
            await asyncio.sleep(0)
        return sent

    assert run(scenario) == ["data: 1\n\n", "data: 2\n\n"]


def test_a_quiet_line_sends_a_heartbeat_and_ends_at_its_end_time():
    async def scenario() -> list[str]:
        server = Server()
        now = time.time()
        line = Line(server.send, now + HOUR, asyncio.get_running_loop(), now=now)
        line.tick(now + HEARTBEAT - 1)
        line.tick(now + HEARTBEAT)
        line.tick(now + HOUR)
        return server.sent

    assert run(scenario) == [STILL_HERE, END + "|"]


def test_the_hub_hands_events_out_in_slices_with_other_work_between(monkeypatch):
    """10 000 writes in one go would hold the event loop for a third of a second: past each
    ``SENDING_SLICE`` the hub lets the process's other work (its requests) take a turn."""
    monkeypatch.setattr(subscription, "SENDING_SLICE", 0.0)  # a turn after every send

    class Listener:
        def __init__(self, log: list[str], name: str) -> None:
            self.log, self.name = log, name

        def send(self, event: str) -> None:
            self.log.append(self.name)

    async def scenario() -> list[str]:
        log: list[str] = []

        async def other_work() -> None:
            for _ in range(3):
                log.append("other")
                await asyncio.sleep(0)

        listeners = [Listener(log, f"stream {n}") for n in range(3)]
        other = asyncio.ensure_future(other_work())
        await subscription._hand_out(listeners, ["data: 1\n\n", None, "data: 1\n\n"])  # type: ignore [arg-type]
        await other
        return log

    log = run(scenario)
    assert log.index("other") < log.index("stream 2")  # it ran between two sends
    assert [entry for entry in log if entry != "other"] == ["stream 0", "stream 2"]


def test_a_send_runs_in_the_stream_s_own_context_whichever_task_calls_it():
    """A middleware's ``send`` that sets a context variable until its write is done (a tracer's
    span) finds it again after a wait, and the task that offered the state sees none of it."""
    span: contextvars.ContextVar[str] = contextvars.ContextVar("span", default="none")

    async def scenario() -> tuple[list[str], str]:
        server = Server()
        seen: list[str] = []

        async def traced(message: dict[str, Any]) -> None:
            token = span.set("stream")
            try:
                await server.send(message)
                seen.append(span.get())
            finally:
                span.reset(token)  # raises in another context than the one that set it

        line = Line(traced, time.time() + HOUR, asyncio.get_running_loop())
        server.full = True
        line.offer("data: 1\n\n")
        await asyncio.sleep(0)
        server.full = False
        server.room.set()
        for _ in range(5):
            await asyncio.sleep(0)
        line.end()
        return [*seen, str(await line.over)], span.get()

    assert run(scenario) == (["stream", "stream", "False"], "none")
