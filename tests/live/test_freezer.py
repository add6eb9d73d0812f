"""``LiveStreams``' freezer (``whos_online.live.resources``) keeps the garbage collector's full
passes off what the process's streams hold: it freezes after a collection each time ``every``
streams have begun, thaws (and collects) a second after four times as many frozen streams have
ended as are open, if that still holds, and leaves a process that froze objects itself, or
turned its collector off, alone. Here against a collector that records what it is asked; a
stream's end leaving no cycle (what makes freezing safe) is tested on a stream in
``test_live_streams.py``."""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from whos_online.asgi import LiveStreams
from whos_online.live import resources as freezer_module
from whos_online.live.resources import FREEZE_EVERY, THAW_AFTER, Freezer

if TYPE_CHECKING:
    from collections.abc import Callable


class Collector:
    """The calls ``Freezer`` makes of ``gc``, and what it reads of it."""

    def __init__(self, *, frozen: int = 0, enabled: bool = True) -> None:
        self.calls: list[str] = []
        self.frozen = frozen
        self.enabled = enabled
        #: What the freezer asked to do later, and after how long; the time (``clock``).
        self.later: list[tuple[float, Callable[[], None]]] = []
        self.now = 1000.0

    def clock(self) -> float:
        return self.now

    def call_later(self, delay: float, then: Callable[[], None]) -> None:
        self.later.append((delay, then))

    def run_later(self) -> None:
        later, self.later = self.later, []
        for _delay, then in later:
            then()

    def isenabled(self) -> bool:
        return self.enabled

    def get_freeze_count(self) -> int:
        return self.frozen

    def collect(self) -> None:
        self.calls.append("collect")

    def freeze(self) -> None:
        self.calls.append("freeze")
        self.frozen += 100

    def unfreeze(self) -> None:
        self.calls.append("unfreeze")
        self.frozen = 0


class Streams:
    """Streams held by a freezer: begun and ended at will."""

    def __init__(self, freezer: Freezer) -> None:
        self.freezer = freezer
        self._open: list[contextlib.ExitStack] = []

    def begin(self, count: int = 1) -> None:
        for _ in range(count):
            held = contextlib.ExitStack()
            held.enter_context(self.freezer.holding())
            self._open.append(held)

    def end(self, count: int = 1, *, newest: bool = False) -> None:
        for _ in range(count):
            self._open.pop(-1 if newest else 0).close()


def held(every: int = 3, **collector: Any) -> tuple[Streams, Collector]:
    found = Collector(**collector)
    freezer = Freezer(
        every,
        collector=found,  # type: ignore [arg-type]
        later=found.call_later,
        clock=found.clock,
    )
    return Streams(freezer), found


def test_it_freezes_after_a_collection_each_time_every_streams_have_begun():
    streams, collector = held(every=3)

    streams.begin(2)
    assert collector.calls == []
    streams.begin()
    assert collector.calls == ["collect", "freeze"]
    streams.end(3)  # three ended frozen, none open: thawed
    collector.run_later()
    streams.begin(3)
    assert collector.calls[-2:] == ["collect", "freeze"]
    assert streams.freezer.freezes == 2


def test_it_thaws_and_collects_once_four_times_as_many_frozen_streams_ended_as_are_open():
    """A second later: what the streams that just ended held goes with their connections."""
    streams, collector = held(every=10)
    streams.begin(10)  # frozen
    calls = len(collector.calls)

    streams.end(7)  # 7 ended, 3 open
    assert collector.later == []
    streams.end()  # 8 ended, 2 open: 8 >= 4 * 2
    streams.end()
    assert [delay for delay, _then in collector.later] == [THAW_AFTER]  # once
    assert len(collector.calls) == calls
    collector.run_later()
    assert collector.calls[calls:] == ["unfreeze", "collect"]
    assert collector.frozen == 0


def test_a_thaw_due_is_not_done_if_streams_opened_meanwhile():
    streams, collector = held(every=10)
    streams.begin(10)
    streams.end(8)
    streams.begin(2)  # 8 ended, 4 open
    collector.run_later()
    assert collector.calls == ["collect", "freeze"]
    streams.end(2, newest=True)
    collector.run_later()
    assert collector.calls == ["collect", "freeze", "unfreeze", "collect"]


def test_streams_begun_after_the_last_freeze_do_not_count_as_frozen_ones_ended():
    streams, collector = held(every=4)
    streams.begin(4)  # frozen
    streams.begin(2)  # not (yet)

    streams.end(2, newest=True)  # the two unfrozen end: not counted
    streams.end(3)  # three frozen ended, one open: not yet (it would be, had all five counted)
    collector.run_later()
    assert collector.calls == ["collect", "freeze"]
    streams.end()
    collector.run_later()
    assert collector.calls == ["collect", "freeze", "unfreeze", "collect"]


def test_a_thaw_asked_for_on_an_event_loop_that_closed_is_asked_for_again_once_overdue():
    streams, collector = held(every=4)
    streams.begin(4)  # frozen
    streams.begin()
    streams.end(4)  # 4 frozen ended, 1 open: asked for
    assert len(collector.later) == 1
    collector.later.clear()  # its event loop closed: it never runs
    collector.now += THAW_AFTER
    streams.end()
    assert collector.later == []  # not overdue yet
    collector.now += THAW_AFTER
    streams.begin()
    streams.end()
    assert len(collector.later) == 1
    collector.run_later()
    assert collector.calls[-2:] == ["unfreeze", "collect"]


def test_the_thaw_runs_on_the_event_loop_the_last_stream_ended_on(monkeypatch):
    monkeypatch.setattr(freezer_module, "THAW_AFTER", 0.0)
    collector = Collector()
    freezer = Freezer(2, collector=collector)  # type: ignore [arg-type]

    async def scenario() -> None:
        for _ in range(2):
            with freezer.holding():
                pass
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    asyncio.run(scenario())
    assert collector.calls == ["collect", "freeze", "unfreeze", "collect"]


def test_a_process_that_froze_objects_itself_is_left_alone():
    """A site that called ``gc.freeze()`` before forking its workers: thawing would undo it."""
    streams, collector = held(every=2, frozen=5000)

    streams.begin(10)
    streams.end(10)
    collector.run_later()
    assert collector.calls == []
    assert collector.frozen == 5000


def test_nothing_is_frozen_while_the_collector_is_off():
    streams, collector = held(every=2, enabled=False)

    streams.begin(4)
    assert collector.calls == []
    collector.enabled = True
    streams.begin(2)
    assert collector.calls == ["collect", "freeze"]


def test_live_streams_holds_its_streams_in_a_freezer_unless_told_not_to():
    async def application(scope: Any, receive: Any, send: Any) -> None:
        pass

    found = LiveStreams(application).freezer
    assert isinstance(found, Freezer)
    assert found._every == FREEZE_EVERY
    assert LiveStreams(application, freeze=False).freezer is None
