"""The visits a process has recorded and not written yet: one per person, their latest.

The request path puts a visit here and moves on; the flusher takes everything and hands back what
it could not write, ahead of what came since. Bounded in people, so that an outage costs memory
per person, not per page ("The flusher" in docs/how-it-works.md).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

from whos_online.backend import connection
from whos_online.backend.keyspace import person_key
from whos_online.store.items import GO, KEEP, STAY, Link, Visit

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from whos_online.backend import keyspace
    from whos_online.backend.clients import Client
    from whos_online.config.settings import Config


logger = logging.getLogger("whos_online")

#: Items a process holds at most (one visit per person, and readers leaving rooms), to be written
#: or waiting to be written again: 6.7 MiB for as many guests' visits (351 B each, tracemalloc;
#: the process's resident set grows by about 28 MiB, see ``bench/outage_queue.py``), and at a
#: thousand people arriving a second, a twenty-second outage.
QUEUE_SIZE: Final = 20_000


@dataclass(frozen=True)
class RoomLeave:
    """A page's reader leaving its room at ``at``: counted in it a few seconds more, if it is
    theirs (``LEAVE_GRACE``)."""

    kind: str
    member: str
    room: str
    at: float

    @property
    def person(self) -> str:
        return person_key(self.kind, self.member)


Item = Visit | RoomLeave | Link


def merge(earlier: Visit, later: Visit) -> Visit:
    """One visit for two of the same person queued one after the other: the later one, which
    also takes the earlier one off its former person, and leaves the room the earlier one put
    them in as the later one's mode says (a request that is not a page view leaves the person in
    the room of the page view before it; a page's "still here" does not undo a later page)."""
    room, mode = later.room, later.room_mode
    if mode == KEEP or (mode == STAY and earlier.room_mode == GO and earlier.room != later.room):
        room, mode = earlier.room, earlier.room_mode
    return replace(
        later,
        former=later.former or earlier.former,
        daily_id=later.daily_id or earlier.daily_id,
        room=room,
        room_mode=mode,
    )


#: What the queue holds an item by: a person's key (a visit), ``leave:`` and it (a leave), or a
#: connection's person, room and id.
Key = str | tuple[str, str, str]


def _key(item: Item) -> Key:
    """A visit is queued by person, a leave by person too (apart), a connection's entering or
    leaving by person, room and connection: the later of two of one connection wins."""
    if isinstance(item, Visit):
        return item.person
    if isinstance(item, Link):
        return (item.person, item.room, item.connection)
    return f"leave:{item.person}"


class VisitQueue:
    def __init__(self, size: int = QUEUE_SIZE) -> None:
        self.size = size
        self._items: OrderedDict[Key, Item] = OrderedDict()
        self._lock = threading.Lock()
        #: How many items ``take`` handed out that are not settled yet.
        self._taken = 0
        #: Persons forgotten while items were taken: what comes back of them is dropped.
        self._forgotten: set[str] = set()
        #: Items dropped because the queue was full, since the process started.
        self.dropped = 0
        #: How many had been dropped when the queue last filled up, while it still is (it is
        #: once writes succeed again: ``report_drops``); None while it is not.
        self._dropped_before: int | None = None

    def put(self, item: Item) -> bool:
        """Queue ``item`` after everything queued; False if the queue is full (it is dropped,
        counted, and the log says so once until writes succeed again)."""
        key = _key(item)
        with self._lock:
            earlier = self._items.pop(key, None)
            if earlier is None and len(self._items) + self._taken >= self.size:
                self.dropped += 1
                filling_up = self._dropped_before is None
                if filling_up:
                    self._dropped_before = self.dropped - 1
            else:
                self._items[key] = _merged(earlier, item)
                return True
        if filling_up:
            logger.warning(
                "whos_online's queue is full (%d visits waiting while Redis could not be "
                "written): visits are dropped and counted until a write succeeds.",
                self.size,
            )
        return False

    def report_drops(self) -> None:
        """Once writes succeed again after the queue was full: say how many visits it dropped."""
        before, self._dropped_before = self._dropped_before, None
        if before is not None:
            logger.warning(
                "whos_online writes to Redis again; it dropped %d visits while its queue was full.",
                self.dropped - before,
            )

    def take(self) -> list[Item]:
        """Everything queued, in order; the queue is empty afterwards. Hand what could not be
        written to ``settle``."""
        with self._lock:
            items = list(self._items.values())
            self._items.clear()
            self._taken = len(items)
            self._forgotten.clear()
        return items

    def settle(self, unwritten: Sequence[Item]) -> None:
        """Say that everything ``take`` handed out was written but ``unwritten``, which goes back
        ahead of what was queued since, each person's items merged as ``put`` merges them (but
        for the persons forgotten since)."""
        with self._lock:
            self._taken = 0
            forgotten, self._forgotten = self._forgotten, set()
            if not unwritten:
                return
            newer = self._items
            self._items = OrderedDict(
                (_key(item), item) for item in unwritten if item.person not in forgotten
            )
            for key, item in newer.items():
                self._items[key] = _merged(self._items.pop(key, None), item)

    def forget(self, who: str) -> None:
        """Drop what is queued of the person ``who``, and what comes back of them from a write
        under way (an erasure must not be undone)."""
        with self._lock:
            self._items.pop(who, None)
            self._items.pop(f"leave:{who}", None)
            if self._taken:
                self._forgotten.add(who)

    def __len__(self) -> int:
        return len(self._items)

    def busy(self) -> bool:
        """Whether a thread is changing the queue now (it may hold what ``len`` does not count
        yet): for a signal handler, which must not wait for the lock."""
        return self._lock.locked()


def _merged(earlier: Item | None, later: Item) -> Item:
    if isinstance(earlier, Visit) and isinstance(later, Visit):
        return merge(earlier, later)
    return later


#: Jobs a process holds at most while Redis cannot be written; beyond, the newest are dropped
#: (a logout then ends when the window does).
MOST_WAITING: Final = 10_000


@dataclass(frozen=True)
class Job:
    """A write to make with the next flush, behind the breaker of ``shard`` (None for the base
    shard's)."""

    write: Callable[[Client, Config], object]
    shard: keyspace.Shard | None = None

    @property
    def tag(self) -> str:
        return "" if self.shard is None else self.shard.tag


class FlushJobs:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._waiting: list[Job] = []
        self._dropping = False

    def add(self, job: Job) -> bool:
        """Hold ``job`` for the next flush; False when too many wait already (it is dropped)."""
        with self._lock:
            if len(self._waiting) >= MOST_WAITING:
                if not self._dropping:
                    self._dropping = True
                    logger.warning(
                        "whos_online holds %d logouts that Redis has not taken; further ones "
                        "are dropped (their users stay listed until the window ends)",
                        MOST_WAITING,
                    )
                return False
            self._waiting.append(job)
            return True

    def run(self) -> frozenset[str]:
        """Run the jobs held, in order; those from the first that fails on are kept, ahead of
        any added meanwhile. Returns the tag of the shard that failed (none if all ran)."""
        with self._lock:
            waiting, self._waiting = self._waiting, []
        for index, job in enumerate(waiting):
            if not connection.call(False, _done(job), shard=job.shard, writes=True):
                with self._lock:
                    self._waiting[:0] = waiting[index:]
                return frozenset({job.tag})
        self._dropping = False
        return frozenset()

    def __len__(self) -> int:
        return len(self._waiting)


def _done(job: Job) -> Callable[[Client, Config], bool]:
    def write(client: Client, config: Config) -> bool:
        job.write(client, config)
        return True

    return write
