"""The process's flusher: what requests queued is written off the request path every
``FLUSH_INTERVAL``, each shard's visits in one call, all the calls in one round trip, because a
slow Redis must cost the pages nothing and batches cost Redis a tenth per visit (performance
page). A failed write goes back to the queue, ahead of newer visits; reads write the queue first
(``flush_with``) to see their process's visits; a stopping process writes all it holds (``close``).
"""

from __future__ import annotations

import logging
import multiprocessing.util
import threading
import time
from typing import TYPE_CHECKING, Any, Final, TypeVar

from whos_online.backend import connection, keyspace
from whos_online.config import process
from whos_online.config.process import PerProcess
from whos_online.config.settings import get_config
from whos_online.flushing import batches, changes, schedule
from whos_online.flushing.queue import FlushJobs, Item, Job, RoomLeave, VisitQueue
from whos_online.flushing.schedule import FlushThread
from whos_online.store import counters, epochs, scripts
from whos_online.store.results import parse_reply

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from whos_online.backend.clients import Client
    from whos_online.config.settings import Config
    from whos_online.store.scripts import ScriptCall

logger = logging.getLogger("whos_online")

T = TypeVar("T")

#: Longest an exiting process waits for a flush its thread has started.
EXIT_WAIT: Final = 2.0
#: Passes of one flush at most: a second writes what the first left (hits counted while a failed
#: batch waited, visits queued meanwhile); more would let a busy process write for ever.
FLUSH_PASSES: Final = 2


class Flusher:
    def __init__(self) -> None:
        self.queue = VisitQueue()
        #: Writes a flush makes before the queue's: a logout's (``flush_jobs``).
        self.jobs = FlushJobs()
        #: One flush at a time, so that a batch that failed is sent again before newer ones.
        self._lock = threading.Lock()
        #: The process's flushing thread (``thread``), which also tells what flushes changed.
        self.thread = FlushThread(self._on_thread)
        #: What flushes changed, not told yet (``events``).
        self.changes = changes.Pending()
        #: When the process's layout was last registered with a batch.
        self.registration = batches.Registration()
        #: Whether the site kept data in another layout of shards (as its last batch says).
        self.layouts_in_use = True
        #: Batches of page hits when their key was last forgotten: a second exit hook does nothing.
        self._hits_forgotten_at = 0
        #: Until when (monotonic) a failed write of the stopping process goes on trying, for the
        #: SIGTERM handler, which waits for it without a lock (``write_until``); None before.
        self.retrying_until: float | None = None
        #: Whether this process has said what its stop could not write (once: ``report_lost``).
        self._reported_loss = False

    # The request path

    def put(self, item: Item) -> bool:
        """Queue ``item``; False when the queue is full (it is dropped, and counted)."""
        return self.queue.put(item)

    def schedule(self, delay: float) -> None:
        """Flush within ``delay`` seconds from the flushing thread (not before a back-off)."""
        self.thread.schedule(delay)

    # Flushing

    def flush(self) -> frozenset[str]:
        """Write what is queued now; returns the tags of the shards that failed or a breaker held
        back (their items stay queued, ahead of newer ones). A stopping process's write tries
        again until ``STOP_TIMEOUT``, except on the flushing thread, which backs off as ever."""
        if process.stop_began() is not None and not self.thread.is_current():
            return self._flush_while_stopping()
        with self._lock:
            return self._flush(get_config())

    def _flush_while_stopping(self) -> frozenset[str]:
        """``flush`` through a stall, letting go of the lock between two tries, so that the
        process's reads and other writes do not wait for the stall to end."""
        config = get_config()
        failed = schedule.write_until(
            lambda: self._flush_with_lock(config), schedule.deadline(config), self._retrying
        )
        if failed:
            self._report_loss(config)
        return failed

    def _flush_with_lock(self, config: Config) -> frozenset[str]:
        with self._lock:
            return self._flush(config)

    def _retrying(self, until: float) -> None:
        self.retrying_until = until

    def _report_loss(self, config: Config) -> None:
        """Say, once per process, what its stop could not write (``write_until``)."""
        if self._reported_loss:
            return
        self._reported_loss = True
        hits = buffered.total() if (buffered := batches.held()) is not None else 0
        schedule.report_lost(config, len(self.queue), hits, len(self.jobs))

    def _on_thread(self) -> bool:
        """Flush, then tell what flushes changed, whichever thread wrote them; True if failed."""
        failed = bool(self.flush())
        if self.changes.holds():
            due = self.changes.deliver(get_config(), Flusher)
            if due is not None:
                self.thread.schedule(due)
        return failed

    def _flush(self, config: Config) -> frozenset[str]:
        return self._run_jobs(config) | self._write_queue(config)

    def _run_jobs(self, config: Config) -> frozenset[str]:
        """A logout's jobs, which go before the queue, as they came before what is queued now; one
        that is refused backs off like a failed batch."""
        failed = self.jobs.run() if len(self.jobs) else frozenset()
        if failed:
            self._back_off_after(config, failed)
        return failed

    def _write_queue(self, config: Config) -> frozenset[str]:
        for _pass in range(FLUSH_PASSES):
            held = self._held_back(config)
            if held:
                self._back_off(config)
                return held
            prepared = self._prepare(config, time.time())
            if prepared is None:
                return frozenset()
            failed = self._write(prepared)
            if failed:
                return failed
        return frozenset()

    def _held_back(self, config: Config) -> frozenset[str]:
        """The tags of the shards, when something waits and a breaker says every one fails: the
        queue then stays as it is, not encoded for a write that would not be tried."""
        if connection.breakers_passed():
            return frozenset()
        shards = keyspace.layout(config)
        if config.redis_cluster:  # a breaker per shard
            refused = [
                shard.tag
                for shard in shards
                if not connection.Attempt(config, shard, writes=True).allowed
            ]
        elif not connection.Attempt(config, None, writes=True).allowed:
            refused = [shard.tag for shard in shards]
        else:
            return frozenset()
        if len(refused) < len(shards) or not self.pending():
            return frozenset()
        return frozenset(refused)

    def _back_off(self, config: Config) -> None:
        self.thread.back_off(config.failure_backoff or 1.0)

    def _back_off_after(self, config: Config, failed: Iterable[str]) -> None:
        """After a write to the shards ``failed`` failed: wait out the back-off if a breaker is
        open for one of them, else (one slow reply is no outage) try again with the next flush."""
        shards = {shard.tag: shard for shard in keyspace.layout(config)}
        if any(connection.known_to_fail(config, shards.get(tag), writes=True) for tag in failed):
            self._back_off(config)
        else:
            self.thread.back_off(config.flush_interval)

    def flush_with(
        self,
        read: Callable[[Client, Config, Sequence[ScriptCall]], tuple[list[Any], T]],
        default: T,
    ) -> T:
        """Write what is queued and make a read, in one round trip where the client allows:
        ``read(client, config, calls)`` runs the flush's ``calls``, then its own, and returns
        both replies; ``default`` if Redis failed. With nothing queued, it reads without a lock."""
        if not self._lock.locked() and not self.pending():
            found = connection.call(None, lambda client, config: read(client, config, []))
            return default if found is None else found[1]
        with self._lock:
            config = get_config()
            prepared = None
            if config.redis_cluster:
                self._flush(config)  # one call per shard anyway: written first, then the read
            elif self._held_back(config):
                self._back_off(config)  # the read alone; the queue stays as it is
            else:
                self._run_jobs(config)  # a logout's, which the read must not contradict
                prepared = self._prepare(config, time.time())
            calls = prepared.calls if prepared is not None else []
            found = connection.call(None, lambda client, config: read(client, config, calls))
            if prepared is not None:
                written = None if found is None else found[0]
                error = next(
                    (reply for reply in written or () if isinstance(reply, Exception)), None
                )
                if error is not None:
                    connection.Attempt(config, None, writes=True).failed(error)
                    written = None
                self._settle(prepared, batches.split(prepared, written))
            return default if found is None else found[1]

    def _prepare(self, config: Config, now: float) -> batches.Prepared | None:
        """Take the queue and the page hits, and make the calls that write them (hand them to
        ``_settle``, through ``_write`` or a read's round trip); None when there is nothing."""
        items = self.queue.take()
        batch = batches.buffer().take()
        if not items and batch is None:
            return None
        # The layout rides along with the base shard's call, never a call of its own.
        return batches.prepare(config, items, batch, self.registration.due(config), now)

    def _write(self, prepared: batches.Prepared) -> frozenset[str]:
        config = get_config()
        if not config.redis_cluster:
            calls = prepared.calls
            replies = connection.call(
                None, lambda client, _config: scripts.run(client, calls), writes=True
            )
            return self._settle(prepared, batches.split(prepared, replies))
        results = [batches.write_group(group) for group in prepared.groups]
        return self._settle(prepared, results)

    def _settle(
        self, prepared: batches.Prepared, results: Sequence[list[Any] | None]
    ) -> frozenset[str]:
        """Take in how the write of ``prepared`` went (each group's replies, None for a group
        whose write failed); returns the tags of the shards that failed."""
        failed = set()
        config = get_config()
        changed = False
        for group, replies in zip(prepared.groups, results, strict=True):
            if replies is None:
                failed.add(group.shard.tag)
                continue
            parsed = [parse_reply(raw) for raw in replies]
            for reply in parsed:
                epochs.current().learn(group.shard.tag, reply.epoch)
                if group.shard.is_base:
                    self.layouts_in_use = reply.layouts > 0
            changed = self.changes.take_in(config, group.entries, parsed) or changed
        if changed and not self.thread.is_current():
            self.thread.schedule(0)  # told from the thread, never from a request
        base_written = bool(prepared.groups) and not any(
            group.shard.is_base and group.shard.tag in failed for group in prepared.groups
        )
        if prepared.hits is not None:
            batches.buffer().settle(prepared.hits, added=base_written)
        if prepared.layout and base_written:
            self.registration.done(prepared.layout)
        self.queue.settle(
            [item for item, tags in prepared.items if not tags.isdisjoint(failed)] if failed else []
        )
        if failed:
            self._back_off_after(config, failed)
        else:
            self.thread.recovered()
            self.queue.report_drops()
        return frozenset(failed)

    def pending(self) -> bool:
        return bool(len(self.queue) or batches.buffer().total() or len(self.jobs))

    def idle(self) -> bool:
        """Whether nothing waits, is being queued or is being flushed, as far as can be told
        without a lock: for a signal handler, which may have stopped its holder."""
        return not (len(self.queue) or self.queue.busy() or len(self.jobs) or self._lock.locked())

    def add_job(self, job: Job) -> bool:
        """Hold ``job`` for the next flush, which runs it before the queue (``jobs``); False when
        too many wait already (it is dropped, and the log says so once)."""
        return self.jobs.add(job)

    def may_hold_other_layouts(self) -> bool:
        """Whether the site may keep data in another layout of shards, as the last batch said."""
        return self.layouts_in_use

    def forget(self, persons: Iterable[str]) -> None:
        """Drop all the process holds of ``persons`` (by their keys, ``u:<pk>``...), queued or to
        be sent again, so that nothing of theirs is written later (an erasure, a logout)."""
        for who in persons:
            self.queue.forget(who)

    # Stopping

    def close(self) -> None:
        """Write what the process holds as it exits, through a stall until ``STOP_TIMEOUT``, and
        tell what changed; with nothing to write, the settings are not even read."""
        self.thread.stop()
        if not self._lock.acquire(timeout=EXIT_WAIT):
            return
        try:
            if self.pending() or batches.buffer().numbered != self._hits_forgotten_at:
                config = get_config()
                failed = schedule.write_until(
                    lambda: self._flush(config), schedule.deadline(config), self._retrying
                )
                if failed:
                    self._report_loss(config)
                numbered = batches.buffer().numbered
                if not failed and numbered and not batches.buffer().total():
                    key = counters.applied_key(get_config(), batches.buffer().token)
                    forgot = connection.call(
                        None, lambda client, _config: client.delete(key), writes=True
                    )
                    if forgot is not None:
                        self._hits_forgotten_at = numbered
            if self.changes.holds():
                self.changes.deliver(get_config(), Flusher, at_once=True)
        finally:
            self._lock.release()


def _register_exit(made: Flusher) -> None:
    # A child of multiprocessing starts with its parent's finalizers cleared and ends with
    # os._exit, which skips atexit: a finalizer registered here runs as it ends (apps.py also
    # registers atexit; writing twice is harmless).
    multiprocessing.util.Finalize(None, write_at_exit, exitpriority=10)


def _stop(old: Flusher) -> None:
    """Drop what is queued and stop the thread (settings changed: tests), waiting a little for
    it to end, so that it does not outlive the settings it was started under."""
    old.thread.stop()


_flushers: Final = PerProcess(Flusher, started=_register_exit, dropped=_stop)


def current() -> Flusher:
    """This process's flusher, made at its first use here (``config.process``)."""
    return _flushers.get()


def write_at_exit() -> None:
    """Write what this process holds as it exits (``Flusher.close``), if it made a flusher."""
    process.exiting()
    made = _flushers.peek()
    if made is not None:
        made.close()


def flush() -> bool:
    """Write what this process has queued (visits and page hits) now, rather than at most
    ``FLUSH_INTERVAL`` later; False if Redis could not be written (it is kept, and sent again)."""
    return not current().flush()


def holds_anything() -> bool:
    """Whether this process holds or is writing anything, told without making the flusher or the
    hit buffer and without a lock (for a signal handler: see ``Flusher.idle``)."""
    made = _flushers.peek()
    buffered = batches.held()
    return (made is not None and not made.idle()) or (buffered is not None and buffered.holds())


def writes_at_once(config: Config) -> bool:
    """Whether a recorded request writes the queue itself (``FLUSH_INTERVAL`` 0, or stopping)."""
    return not config.flush_interval or process.is_stopping()


def after_recording(config: Config) -> frozenset[str]:
    """What a recorded request does once it has queued its visit: wake the thread, or write the
    queue now (``writes_at_once``); returns the tags of the shards that could not be written."""
    if writes_at_once(config):
        return current().flush()
    current().schedule(config.flush_interval)
    return frozenset()


def after_hit(config: Config) -> None:
    """What counting a page hit does: wake the thread within ``batches.LONGEST_WAIT`` (or
    ``FLUSH_INTERVAL``, when longer), or at once when the process has been asked to stop.

    Hits need no sooner: a process that only counts hits (every request throttled) then writes
    at most once a second, and a visit queued meanwhile brings the flush forward, the hits riding
    along with it."""
    if process.is_stopping():
        current().schedule(0)
    else:
        current().schedule(max(config.flush_interval, batches.LONGEST_WAIT))


def leave_room(kind: str, member: str, room: str, at: float) -> bool:
    """Queue a page's reader leaving ``room`` at ``at``."""
    queued = current().put(RoomLeave(kind, member, room, at))
    after_recording(get_config())
    return queued
