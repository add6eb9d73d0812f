"""Writing what a process queued: every ``FLUSH_INTERVAL``, all of a shard's visits in one call,
all the calls of one flush in one round trip on one Redis.

A recorded request puts its visit in the process's queue (``visit_queue``) and returns: it never
waits on Redis. A thread of the process (started with the first visit) writes the queue at most
``FLUSH_INTERVAL`` seconds after something was queued, with the page hits counted since and, on
the shard whose slot holds the site-wide keys, the layout the process writes in. Redis does a
visit's work for about a tenth of its per-call cost when visits come in batches of twenty or more
(see the performance page), and a frozen or slow Redis costs the pages nothing.

A flush whose write fails puts what it took back in the queue, ahead of what was queued since,
where a person's visits merge as usual: while Redis cannot be written, a person holds one visit
however many pages they open, and the queue's bound counts people. The breaker logs the outage
once. While a breaker says that writes fail, a flush leaves the queue as it is, neither taken nor
encoded (a read that writes the queue first reads alone), and the thread waits out the back-off
whatever the pages queue meanwhile. A write that only timed out, which does not open the breaker
by itself (``breakers``), goes again with the next flush. A queue that fills up while Redis
cannot be written drops the visits of people not queued yet and counts them
(``VisitQueue.dropped``); the log says so when it starts, and how many it dropped once a write
succeeds again. ``forget`` drops what the process holds of given persons, queued or kept after a
failure, for an erasure or a logout.

Reads made by the process (the snapshot of the tags and the JSON view, the API's reads) write
its queue first (``flush_with``), so that it always sees its own visits: in the same round trip
on one Redis; on a cluster, whose pipelines refuse scripts, the flush goes just before the read.
``flush()`` writes the queue now: for tests, scripts and shutdown hooks. With ``FLUSH_INTERVAL``
0 each recorded request writes the queue itself; the thread then only tells what changed.

What the process holds when it stops is written as it exits (``stopping``), and from the moment
it is asked to stop or begins to exit, a write that fails is tried again through a short stall
of Redis, for ``STOP_TIMEOUT`` (``write_until``). What the flushes changed is told from the thread
(``events``): signals, and one message on Redis per second.
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
from whos_online.store import counters, epochs, record, scripts

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Sequence

    from whos_online.backend.clients import Client
    from whos_online.config.settings import Config
    from whos_online.store.scripts import ScriptCall

logger = logging.getLogger("whos_online")

T = TypeVar("T")

#: Longest an exiting process waits for a flush its thread has started.
EXIT_WAIT: Final = 2.0
#: Passes of one flush at most: a second one writes what the first left (page hits counted
#: while a failed batch of them waited, visits queued meanwhile); more would let a busy process
#: keep its flushing thread, and a caller of ``flush``, writing for ever.
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
        #: Whether the site has kept data in another layout of shards, as the base shard's last
        #: batch said (until one has, assumed so: a logout then reads which).
        self.layouts_in_use = True
        #: How many batches of page hits there were when the key that remembers them was last
        #: forgotten: a process's second exit hook (atexit and multiprocessing's) has nothing to do.
        self._hits_forgotten_at = 0
        #: Until when (monotonic) a write of the stopping process, which has tried once and
        #: failed, goes on trying (``write_until``); None before. For the SIGTERM handler, which
        #: waits for such a write: it is not held up by a lock of the thread the handler runs on.
        self.retrying_until: float | None = None
        #: Whether this process has said what its stop could not write (once: ``report_lost``).
        self._reported_loss = False

    # The request path

    def put(self, item: Item) -> bool:
        """Queue ``item``; False when the queue is full (it is dropped, and counted)."""
        return self.queue.put(item)

    def schedule(self, delay: float) -> None:
        """Flush at most ``delay`` seconds from now, from the process's flushing thread; after
        a failed flush, no earlier than its back-off."""
        self.thread.schedule(delay)

    # Flushing

    def flush(self) -> frozenset[str]:
        """Write what is queued now; returns the tags of the shards whose write failed, or
        which a breaker keeps from being tried (what was for them goes back to the queue, ahead
        of what was queued since, or stays there). Once the process is stopping, a write that
        fails is tried again until ``STOP_TIMEOUT`` after the stop began (``write_until``), but on
        the flushing thread, which tries again after the back-off as ever: the stop's own
        writes try meanwhile.

        A batch of page hits that failed before goes alone, before the hits counted since: those
        follow in a second pass, as does what was queued while the first was on its way."""
        if process.stop_began() is not None and not self.thread.is_current():
            return self._flush_while_stopping()
        with self._lock:
            return self._flush(get_config())

    def _flush_while_stopping(self) -> frozenset[str]:
        """``flush`` through a stall, letting go of the lock between two tries: the process's
        other writes then wait for one try at most (and find nothing left once one succeeded),
        and its reads meanwhile do not wait for the stall to end."""
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
        buffered = batches.held()
        schedule.report_lost(
            config,
            len(self.queue),
            buffered.total() if buffered is not None else 0,
            len(self.jobs),
        )

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
        """A logout's jobs, which go before the queue, as they came before what is queued now:
        a login in the same millisecond stands (a visit is recorded unless it is older than the
        logout). One that is refused backs off like a failed batch: on a cluster, one shard
        refusing keeps the thread away too."""
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
        """The tags of the shards, when something waits to be written and a breaker says that
        writes to every one of them fail; else none.

        The queue then stays as it is, not taken and encoded for a write that would not be
        tried: during an outage that would cost every flush, and every read that writes the
        queue first, the encoding of the whole backlog. A stopping process's write, which goes
        past the breakers (``write_until``), is never held back."""
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
        """After a write to the shards ``failed`` failed: wait out the back-off if a breaker
        is open for one of them; if the failure was a timeout that only struck the breaker
        (one slow reply is no outage), the next flush, ``FLUSH_INTERVAL`` from now, tries
        again."""
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
        ``read(client, config, calls)`` runs ``calls`` (the flush's) before its own, and returns
        their replies and what it read. ``default`` if Redis failed (the flush is kept).

        When the process holds nothing and no flush is under way, the read goes alone, without
        the lock, so that the reads of a process's threads go on side by side: whatever this
        thread queued before has been written by then."""
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
            parsed = [record.parse_reply(raw) for raw in replies]
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
        """Whether no visit or job waits, none is being queued, and no flush is under way, as
        far as can be told without taking a lock: for a signal handler, which may have stopped
        the holder of one (``holds_anything``)."""
        return not (len(self.queue) or self.queue.busy() or len(self.jobs) or self._lock.locked())

    def add_job(self, job: Job) -> bool:
        """Hold ``job`` for the next flush, which runs it before the queue (``jobs``); False when
        too many wait already (it is dropped, and the log says so once)."""
        return self.jobs.add(job)

    def may_hold_other_layouts(self) -> bool:
        """Whether the site may keep data in a layout of another ``SHARDS``, as the base shard's
        last batch said (until one has, assumed so)."""
        return self.layouts_in_use

    def forget(self, persons: Iterable[str]) -> None:
        """Drop every visit (and word of leaving a room) of ``persons`` that the process holds,
        queued or waiting to be sent again, and what comes back of them from a write under way
        that fails: so that nothing of theirs the process held is written later (an erasure, a
        logout). Persons as the queue names them (``record.person``: ``u:<pk>``,
        ``guests:<member>``, ``bots:<member>``). A write under way that succeeds still lands."""
        for who in persons:
            self.queue.forget(who)

    # Stopping

    def close(self) -> None:
        """Write what the process holds as it exits: first let a flush the thread has started
        finish (the exit would cut it off), then flush, trying again through a stall of Redis
        until ``STOP_TIMEOUT`` after the stop began (``write_until``), holding the lock throughout:
        nothing comes after; and once the page hits are all written, forget the key that
        remembered this process's batches of them; then tell what changed.
        With nothing to write nor a key to forget, the settings are not read, which a process
        that never recorded (a site not configured yet) may not have right."""
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
    # In the process that made the flusher: a child of multiprocessing (fork, forkserver) starts
    # with the finalizers its parent registered cleared and ends with os._exit, which skips
    # atexit, so a finalizer registered here is what runs as it ends. Elsewhere multiprocessing
    # runs its finalizers at exit too (apps.py registers atexit as well; writing twice is
    # harmless: the second finds nothing).
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
    """Write what this process holds as it exits (see ``Flusher.close``); nothing if it never
    made a flusher, which it does for its first visit or page hit."""
    process.exiting()
    made = _flushers.peek()
    if made is not None:
        made.close()


def flush() -> bool:
    """Write what this process has queued (visits and page hits) now, rather than at most
    ``FLUSH_INTERVAL`` later; False if Redis could not be written (it is kept, and sent again)."""
    return not current().flush()


def holds_anything() -> bool:
    """Whether this process holds visits, page hits or a logout's jobs not written yet, or is
    writing some now, as far as can be told without making the flusher or the hit buffer, and
    without taking a lock (for a signal handler: see ``Flusher.idle``)."""
    made = _flushers.peek()
    buffered = batches.held()
    return (made is not None and not made.idle()) or (buffered is not None and buffered.holds())


def writes_at_once(config: Config) -> bool:
    """Whether a recorded request writes the queue itself: with ``FLUSH_INTERVAL`` 0, or once
    the process has been asked to stop."""
    return not config.flush_interval or process.is_stopping()


def after_recording(config: Config) -> frozenset[str]:
    """What a recorded request does once it has queued its visit: wake the thread, or write the
    queue now (``writes_at_once``); returns the tags of the shards that could not be written."""
    if writes_at_once(config):
        return current().flush()
    current().schedule(config.flush_interval)
    return frozenset()


def after_hit(config: Config) -> None:
    """What counting a page hit does: wake the thread within ``FLUSH_INTERVAL`` (within
    ``batches.LONGEST_WAIT`` when that is 0), or at once when the process has been asked to stop."""
    if process.is_stopping():
        current().schedule(0)
    else:
        current().schedule(config.flush_interval or batches.LONGEST_WAIT)


def leave_room(kind: str, member: str, room: str, at: float) -> bool:
    """Queue a page's reader leaving ``room`` at ``at``."""
    queued = current().put(RoomLeave(kind, member, room, at))
    after_recording(get_config())
    return queued
