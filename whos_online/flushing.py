"""Writing what a process queued: every ``FLUSH_INTERVAL``, all of a shard's visits in one call,
all the calls of one flush in one round trip on one Redis.

A recorded request puts its visit in the process's queue (``visit_queue``) and returns: it never
waits on Redis. A thread of the process (started with the first visit) writes the queue at most
``FLUSH_INTERVAL`` seconds after something was queued, with the page hits counted since and, on
the shard whose slot holds the site-wide keys, the layout the process writes in. Redis does a
visit's work for about a tenth of its per-call cost when visits come in batches of twenty or more
(see the performance page), and a frozen or slow Redis costs the pages nothing.

A flush whose write fails (an outage, a breaker open) keeps its entries and sends them first the
next time, before anything queued since; the breaker logs the outage once. A queue that fills up
while Redis cannot be written drops what comes next, counts it, and logs it once per outage.

Reads made by the process write its queue first (``flush_with``), in the same round trip where
the read allows, so that it always sees its own visits. ``flush()`` writes the queue now: for
tests, scripts and shutdown hooks. With ``FLUSH_INTERVAL`` 0 there is no thread: each recorded
request writes the queue itself, as it writes its own visit.

What the process holds when it stops is written as it exits: at ``atexit`` (and in the finalizers
of a process that multiprocessing started), and under an ASGI server at its first SIGTERM or
SIGINT, from which the process writes each visit at once until it exits (uvicorn ends its
processes with its own re-raised SIGTERM, which no ``atexit`` survives). A process that is killed
(SIGKILL, a crash) loses what it held: at most the last ``FLUSH_INTERVAL`` of visits and page
hits, or what an outage kept queued.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, TypeVar

from django.dispatch import receiver

from whos_online import breakers, connection, counters, epochs, hits, keyspace, store
from whos_online.conf import config_changed, get_config
from whos_online.store.visits import Entry, Extras, Visit, entries_of, leave_room_entry
from whos_online.visit_queue import QUEUE_SIZE, Item, RoomLeave, VisitQueue

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence
    from types import FrameType

    from whos_online.conf import Config
    from whos_online.connection import Client
    from whos_online.store.scripts import ScriptCall

logger = logging.getLogger("whos_online")

T = TypeVar("T")

#: Longest an exiting process waits for a flush its thread has started.
EXIT_WAIT: Final = 2.0
#: Passes of one flush at most: a second one writes what the first left (page hits counted
#: while a failed batch of them waited, visits queued meanwhile); more would let a busy process
#: keep its flushing thread, and a caller of ``flush``, writing for ever.
FLUSH_PASSES: Final = 2
#: Seconds between two registrations of the process's layout (see ``lua/record.lua``), so that a
#: record lost with the data (a Redis restarted empty) comes back.
REGISTER_EVERY: Final = 60.0


def _entries(config: Config, item: Item) -> list[Entry]:
    if isinstance(item, Visit):
        return entries_of(config, item)
    return [leave_room_entry(config, item.kind, item.member, item.room, at=item.at)]


@dataclass
class _Group:
    """One shard's part of a flush: its entries and the calls that write them."""

    shard: keyspace.Shard
    entries: list[Entry] = field(default_factory=list)
    calls: list[ScriptCall] = field(default_factory=list)


@dataclass
class _Prepared:
    groups: list[_Group]
    hits: hits.Batch | None
    layout: str

    @property
    def calls(self) -> list[ScriptCall]:
        return [call for group in self.groups for call in group.calls]


class Flusher:
    def __init__(self) -> None:
        self.queue = VisitQueue()
        #: One flush at a time, so that a batch that failed is sent again before newer ones.
        self._lock = threading.Lock()
        self._wake = threading.Condition()
        self._deadline: float | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        #: Entries whose write failed, sent first by the next flush.
        self._retry: list[Entry] = []
        #: What was last registered (generation, layout), and when (monotonic).
        self._registered: tuple[int, str] | None = None
        self._registered_at = float("-inf")
        #: Whether the site has kept data in another layout of shards, as the base shard's last
        #: batch said (until one has, assumed so: a logout then reads which).
        self.layouts_in_use = True
        #: From the first SIGTERM (or SIGINT) of an ASGI server on, visits are written at once.
        self.immediate = False
        self._dropping = False

    # The request path

    def put(self, item: Item) -> bool:
        """Queue ``item``; False when the queue is full (it is dropped, and counted)."""
        if self.queue.put(item, room=len(self._retry)):
            return True
        if not self._dropping:
            self._dropping = True
            logger.warning(
                "whos_online's queue is full (%d visits waiting while Redis could not be "
                "written): visits are dropped and counted until a write succeeds.",
                QUEUE_SIZE,
            )
        return False

    def schedule(self, delay: float) -> None:
        """Flush at most ``delay`` seconds from now, from the process's flushing thread."""
        deadline = time.monotonic() + delay
        current = self._deadline
        if current is not None and current <= deadline and self._thread is not None:
            return  # the common case, without the lock
        with self._wake:
            if self._deadline is None or deadline < self._deadline:
                self._deadline = deadline
                self._wake.notify()
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="whos_online flusher", daemon=True
                )
                self._thread.start()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._stopping and (
                    self._deadline is None or self._deadline > time.monotonic()
                ):
                    timeout = None if self._deadline is None else self._deadline - time.monotonic()
                    self._wake.wait(timeout)
                if self._stopping:
                    return
                self._deadline = None
            failed = self.flush()
            if failed:
                self.schedule(get_config().failure_backoff or 1.0)

    # Flushing

    def flush(self) -> frozenset[str]:
        """Write what is queued now; returns the tags of the shards whose write failed (their
        entries are kept, and sent first the next time).

        A batch of page hits that failed before goes alone, before the hits counted since: those
        follow in a second pass, as does what was queued while the first was on its way."""
        with self._lock:
            for _pass in range(FLUSH_PASSES):
                prepared = self._prepare(get_config(), time.time())
                if prepared is None:
                    return frozenset()
                failed = self._write(prepared)
                if failed:
                    return failed
            return frozenset()

    def flush_with(
        self,
        read: Callable[[Client, Config, Sequence[ScriptCall]], tuple[list[Any], T]],
        default: T,
    ) -> T:
        """Write what is queued and make a read, in one round trip where the client allows:
        ``read(client, config, calls)`` runs ``calls`` (the flush's) before its own, and returns
        their replies and what it read. ``default`` if Redis failed (the flush is kept)."""
        with self._lock:
            config = get_config()
            prepared = self._prepare(config, time.time())
            if prepared is not None and (
                config.redis_cluster or not breakers.Attempt(config, None, writes=True).allowed
            ):
                # On a cluster, one call per shard anyway; while writes are known to fail, the
                # read alone (the flush is kept for later).
                self._write(prepared)
                prepared = None
            calls = prepared.calls if prepared is not None else []
            found = connection.call(None, lambda client, config: read(client, config, calls))
            if prepared is not None:
                written = None if found is None else found[0]
                error = next(
                    (reply for reply in written or () if isinstance(reply, Exception)), None
                )
                if error is not None:
                    breakers.Attempt(config, None, writes=True).failed(error)
                    written = None
                self._settle(prepared, _split(prepared, written))
            return default if found is None else found[1]

    def _prepare(self, config: Config, now: float) -> _Prepared | None:
        items = self.queue.take()
        entries = self._retry + [entry for item in items for entry in _entries(config, item)]
        self._retry = []
        batch = hits.buffer.take()
        if not entries and batch is None:
            return None
        groups: dict[str, _Group] = {}
        for entry in entries:
            groups.setdefault(entry.shard.tag, _Group(entry.shard)).entries.append(entry)
        base = keyspace.layout(config)[0]
        if batch is not None and base.tag not in groups:
            groups[base.tag] = _Group(base)
        # The layout rides along with the base shard's call, never a call of its own.
        layout = self._layout_to_register(config) if base.tag in groups else ""
        extras = Extras(
            layout=layout,
            hits=_hit_amounts(batch.counts) if batch is not None else None,
            batch=(batch.token, batch.number) if batch is not None else None,
        )
        for tag, group in groups.items():
            group.calls = store.visits.batch_calls(
                config,
                group.shard,
                group.entries,
                now=now,
                epoch=epochs.new_epoch(),
                extras=extras if tag == base.tag else None,
            )
        return _Prepared(list(groups.values()), batch, layout)

    def _write(self, prepared: _Prepared) -> frozenset[str]:
        config = get_config()
        if not config.redis_cluster:
            calls = prepared.calls
            replies = connection.call(
                None, lambda client, _config: store.scripts.run(client, calls), writes=True
            )
            return self._settle(prepared, _split(prepared, replies))
        results = [_write_group(group) for group in prepared.groups]
        return self._settle(prepared, results)

    def _settle(self, prepared: _Prepared, results: Sequence[list[Any] | None]) -> frozenset[str]:
        failed = set()
        for group, replies in zip(prepared.groups, results, strict=True):
            if replies is None:
                self._retry.extend(group.entries)
                failed.add(group.shard.tag)
                continue
            for raw in replies:
                reply = store.visits.parse_reply(raw)
                epochs.epochs.learn(group.shard.tag, reply.epoch)
                if group.shard.is_base:
                    self.layouts_in_use = reply.layouts > 0
        base_written = bool(prepared.groups) and not any(
            group.shard.is_base and group.shard.tag in failed for group in prepared.groups
        )
        if prepared.hits is not None:
            hits.buffer.settle(prepared.hits, added=base_written)
        if prepared.layout and base_written:
            self._registered = (epochs.generation(), prepared.layout)
            self._registered_at = time.monotonic()
        if not failed:
            self._dropping = False
        return frozenset(failed)

    def _layout_to_register(self, config: Config) -> str:
        """The layout the next flush registers, or "" for none: a site that never left the
        one-shard layout keeps no record, and a layout registered this generation, within
        ``REGISTER_EVERY``, needs none."""
        layout = str(config.shards)
        if config.shards == 1 or (
            self._registered == (epochs.generation(), layout)
            and time.monotonic() - self._registered_at < REGISTER_EVERY
        ):
            return ""
        return layout

    def pending(self) -> bool:
        return bool(len(self.queue) or self._retry or hits.buffer.total())

    # Stopping

    def close(self) -> None:
        """Write what the process holds as it exits: first let a flush the thread has started
        finish (the exit would cut it off), then flush; and once the page hits are all written,
        forget the key that remembered this process's batches of them."""
        with self._wake:
            self._stopping = True
            self._wake.notify()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(EXIT_WAIT)
        if not self._lock.acquire(timeout=EXIT_WAIT):
            return
        try:
            prepared = self._prepare(get_config(), time.time())
            failed = self._write(prepared) if prepared is not None else frozenset()
            if not failed and hits.buffer.numbered and not hits.buffer.total():
                key = counters.applied_key(get_config(), hits.buffer.token)
                connection.call(None, lambda client, _config: client.delete(key), writes=True)
        finally:
            self._lock.release()

    def on_signal(self, previous: Any) -> Callable[[int, FrameType | None], Any]:
        """A SIGTERM or SIGINT handler that writes what is queued, writes every later visit at
        once, and hands the signal on to ``previous`` (the server's own handler)."""

        def handle(signum: int, frame: FrameType | None) -> Any:
            self.immediate = True
            if self._lock.acquire(blocking=False):
                try:
                    prepared = self._prepare(get_config(), time.time())
                    if prepared is not None:
                        self._write(prepared)
                finally:
                    self._lock.release()
            if callable(previous):
                return previous(signum, frame)
            if previous != signal.SIG_IGN:  # the default action, as if nothing had been here
                signal.signal(signum, signal.SIG_DFL)
                signal.raise_signal(signum)
            return None

        return handle


def _write_group(group: _Group) -> list[Any] | None:
    """Write one shard's calls behind the breaker of its shard (on a cluster, a master that is
    down takes only its own shards out); None if that failed."""
    calls = group.calls

    def write(client: Client, _config: Config) -> list[Any]:
        return store.scripts.run(client, calls)

    return connection.call(None, write, shard=group.shard, writes=True)


def _split(prepared: _Prepared, replies: list[Any] | None) -> list[list[Any] | None]:
    """The replies of a flush's calls, group by group (all None when it failed)."""
    if replies is None:
        return [None] * len(prepared.groups)
    found: list[list[Any] | None] = []
    start = 0
    for group in prepared.groups:
        found.append(replies[start : start + len(group.calls)])
        start += len(group.calls)
    return found


def _hit_amounts(counts: dict[int, int]) -> dict[tuple[str, int], int]:
    return {(hits.COUNTER_NAME, second): count for second, count in counts.items()}


flusher = Flusher()


def flush() -> bool:
    """Write what this process has queued (visits and page hits) now, rather than at most
    ``FLUSH_INTERVAL`` later; False if Redis could not be written (it is kept, and sent again)."""
    return not flusher.flush()


def flush_now() -> frozenset[str]:
    """``flush``, returning the tags of the shards that could not be written."""
    return flusher.flush()


def writes_at_once(config: Config) -> bool:
    """Whether a recorded request writes the queue itself: with ``FLUSH_INTERVAL`` 0, or while
    an ASGI server stops."""
    return not config.flush_interval or flusher.immediate


def after_recording(config: Config) -> frozenset[str]:
    """What a recorded request does once it has queued its visit: wake the thread, or write the
    queue now (``writes_at_once``); returns the tags of the shards that could not be written."""
    if writes_at_once(config):
        return flusher.flush()
    flusher.schedule(config.flush_interval)
    return frozenset()


def leave_room(kind: str, member: str, room: str, at: float) -> bool:
    """Queue a page's reader leaving ``room`` at ``at``."""
    queued = flusher.put(RoomLeave(kind, member, room, at))
    after_recording(get_config())
    return queued


_signals_installed = False


def install_signal_handlers() -> None:
    """Under an ASGI server, from the main thread: write what is queued at the first SIGTERM or
    SIGINT, and every visit at once from then on, then let the server's handler stop it. Once
    per process."""
    global _signals_installed  # noqa: PLW0603 - once per process
    if _signals_installed or threading.current_thread() is not threading.main_thread():
        return
    _signals_installed = True
    for number in (signal.SIGTERM, signal.SIGINT):
        signal.signal(number, flusher.on_signal(signal.getsignal(number)))


@receiver(config_changed, dispatch_uid="whos_online.flushing.reset")
def reset(**kwargs: object) -> None:
    """Drop what is queued and stop the thread (settings changed: tests)."""
    old = flusher
    with old._wake:
        old._stopping = True
        old._wake.notify()
    _start_afresh()


def _start_afresh() -> None:
    # After a fork, only this rebinding is safe: the parent's locks may be held by threads that
    # did not come along. The child's copy of the parent's queue is dropped, since the parent
    # writes it itself, and so is the thread, which did not survive the fork.
    global flusher  # noqa: PLW0603
    flusher = Flusher()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_start_afresh)
