"""What one flush sends: the queue's visits and the page hits, made into script calls shard by
shard, and the replies handed back group by group.

Page hits ride on the base shard's call as numbered batches, so that a batch sent again is added
once ("The flusher" in docs/how-it-works.md).
"""

from __future__ import annotations

import functools
import secrets
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from whos_online.backend import connection, keyspace
from whos_online.config.process import PerProcess
from whos_online.store import epochs, record, scripts
from whos_online.store.items import Entry, Link, Visit, entries_of, leave_room_entry, link_entry
from whos_online.store.record import Extras

if TYPE_CHECKING:
    from collections.abc import Sequence

    from whos_online.backend.clients import Client
    from whos_online.config.settings import Config
    from whos_online.flushing.queue import Item
    from whos_online.store.scripts import ScriptCall


def entries(config: Config, item: Item) -> list[Entry]:
    """The entries a queued item makes: a visit's (one per shard it touches), a leave's, or a
    connection's."""
    if isinstance(item, Visit):
        return entries_of(config, item)
    if isinstance(item, Link):
        return [link_entry(config, item)]
    return [leave_room_entry(config, item.kind, item.member, item.room, at=item.at)]


def _tags(made: list[Entry]) -> frozenset[str]:
    """The tags of the shards ``made`` go to: one set per shard for an item of one entry, as
    most are, rather than a new one per item."""
    if len(made) == 1:
        return _one_tag(made[0].shard.tag)
    return frozenset(entry.shard.tag for entry in made)


@functools.lru_cache(maxsize=64)
def _one_tag(tag: str) -> frozenset[str]:
    return frozenset((tag,))


@dataclass
class Group:
    """One shard's part of a flush: its entries, in the order its calls write them, and those
    calls."""

    shard: keyspace.Shard
    entries: list[Entry] = field(default_factory=list)
    calls: list[ScriptCall] = field(default_factory=list)


@dataclass
class Prepared:
    groups: list[Group]
    hits: Batch | None
    layout: str
    #: The queue's items, each with the tags of the shards its entries go to: an item goes
    #: back to the queue when the write of any of them fails.
    items: list[tuple[Item, frozenset[str]]]

    @property
    def calls(self) -> list[ScriptCall]:
        return [call for group in self.groups for call in group.calls]


def prepare(
    config: Config,
    items: Sequence[Item],
    batch: Batch | None,
    layout: str,
    now: float,
) -> Prepared:
    """The calls that write ``items`` and the page hits of ``batch``; ``layout`` (or "") is
    registered with the base shard's call, and only when that shard has a call anyway."""
    groups: dict[str, Group] = {}
    placed = []
    for item in items:
        made = entries(config, item)
        for entry in made:
            group = groups.get(entry.shard.tag)
            if group is None:
                group = groups[entry.shard.tag] = Group(entry.shard)
            group.entries.append(entry)
        placed.append((item, _tags(made)))
    base = keyspace.layout(config)[0]
    if batch is not None and base.tag not in groups:
        groups[base.tag] = Group(base)
    if base.tag not in groups:
        layout = ""
    extras = Extras(
        layout=layout,
        hits=hit_amounts(batch.counts) if batch is not None else None,
        batch=(batch.token, batch.number) if batch is not None else None,
    )
    for tag, group in groups.items():
        group.calls, group.entries = record.batch_calls(
            config,
            group.shard,
            group.entries,
            now=now,
            epoch=epochs.new_epoch(),
            extras=extras if tag == base.tag else None,
        )
    return Prepared(list(groups.values()), batch, layout, placed)


def write_group(group: Group) -> list[Any] | None:
    """Write one shard's calls behind the breaker of its shard (on a cluster, a master that is
    down takes only its own shards out); None if that failed."""
    calls = group.calls

    def write(client: Client, _config: Config) -> list[Any]:
        return scripts.run(client, calls)

    return connection.call(None, write, shard=group.shard, writes=True)


def split(prepared: Prepared, replies: list[Any] | None) -> list[list[Any] | None]:
    """The replies of a flush's calls, group by group (all None when it failed)."""
    if replies is None:
        return [None] * len(prepared.groups)
    found: list[list[Any] | None] = []
    start = 0
    for group in prepared.groups:
        found.append(replies[start : start + len(group.calls)])
        start += len(group.calls)
    return found


def hit_amounts(counts: dict[int, int]) -> dict[tuple[str, int], int]:
    return {(COUNTER_NAME, second): count for second, count in counts.items()}


#: Seconds between two registrations of the process's layout (see ``lua/record.lua``), so that a
#: record lost with the data (a Redis restarted empty) comes back.
REGISTER_EVERY: Final = 60.0


class Registration:
    """When this process last registered the layout it writes in (``SHARDS``), which rides along
    with the base shard's call, never a call of its own."""

    def __init__(self) -> None:
        #: What was last registered (generation, layout), and when (monotonic).
        self._registered: tuple[int, str] | None = None
        self._at = float("-inf")

    def due(self, config: Config) -> str:
        """The layout the next flush registers, or "" for none: a site that never left the
        one-shard layout keeps no record, and a layout registered this generation, within
        ``REGISTER_EVERY``, needs none."""
        layout = str(config.shards)
        if config.shards == 1 or (
            self._registered == (epochs.generation(), layout)
            and time.monotonic() - self._at < REGISTER_EVERY
        ):
            return ""
        return layout

    def done(self, layout: str) -> None:
        """``layout`` was registered by a batch just written."""
        self._registered = (epochs.generation(), layout)
        self._at = time.monotonic()


#: The counter page hits are kept in.
COUNTER_NAME: Final = "hits"

#: Longest a hit waits in the buffer while Redis is reachable (``FLUSH_INTERVAL`` when longer),
#: unless a visit's flush takes it sooner.
LONGEST_WAIT: Final = 1.0

#: Distinct seconds kept while Redis cannot be written; older ones are folded into the oldest kept
#: second, so that an outage of any length keeps the total exact and the memory bounded.
MAX_BUFFERED_SECONDS: Final = 3600


@dataclass
class Batch:
    """Hits on their way to Redis: ``token`` and ``number`` name the batch, once and for all."""

    token: str
    number: int
    counts: dict[int, int]

    def total(self) -> int:
        return sum(self.counts.values())


class HitBuffer:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: dict[int, int] = {}
        #: This process's name for its batches; a forked child gets a buffer, and a token, of
        #: its own (see ``buffer``).
        self.token = secrets.token_hex(8)
        self._numbered = 0
        #: The batch sent last, until it is known to be added.
        self._pending: Batch | None = None
        self._in_flight = False

    def add(self, now: float, count: int = 1) -> None:
        second = int(now)
        with self._lock:
            self._counts[second] = self._counts.get(second, 0) + count

    def take(self) -> Batch | None:
        """The batch to write now: the one whose write failed, else what the buffer holds; None
        when there is nothing, or when another thread is writing a batch (one at a time, so
        that a batch that failed is never overtaken by a newer one). Hand it to ``settle``."""
        with self._lock:
            if self._in_flight:
                return None
            if self._pending is None:
                if not self._counts:
                    return None
                self._numbered += 1
                self._pending = Batch(self.token, self._numbered, self._counts)
                self._counts = {}
            self._in_flight = True
            return self._pending

    def settle(self, batch: Batch, *, added: bool) -> None:
        """Say how the write of ``batch`` (from ``take``) went: added (or found added already)
        by Redis, or failed, in which case it is sent again, as it is, next time."""
        with self._lock:
            self._in_flight = False
            if added:
                if self._pending is batch:
                    self._pending = None
                return
            _fold(batch.counts)
            _fold(self._counts)

    @property
    def numbered(self) -> int:
        """How many batches this process has made so far."""
        return self._numbered

    def total(self) -> int:
        with self._lock:
            pending = self._pending.total() if self._pending is not None else 0
            return pending + sum(self._counts.values())

    def holds(self) -> bool:
        """Whether the buffer holds hits, counted or on their way, or a thread is changing it
        now, read without the lock: for a signal handler, which may have stopped its holder."""
        return bool(self._counts) or self._pending is not None or self._lock.locked()


def _fold(counts: dict[int, int]) -> None:
    """Keep at most MAX_BUFFERED_SECONDS seconds, adding the older ones to the oldest kept."""
    if len(counts) > MAX_BUFFERED_SECONDS:
        seconds = sorted(counts)
        cut = len(seconds) - MAX_BUFFERED_SECONDS
        folded = sum(counts.pop(second) for second in seconds[:cut])
        counts[seconds[cut]] += folded


_buffers: Final = PerProcess(HitBuffer)


def buffer() -> HitBuffer:
    """This process's buffer, made at its first use here: a forked child counts its own hits,
    with a token of its own, while the parent writes those it counted (``config.process``)."""
    return _buffers.get()


def held() -> HitBuffer | None:
    """This process's buffer if it made one, without making it."""
    return _buffers.peek()
