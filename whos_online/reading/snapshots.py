"""Reading the site's snapshot, and keeping the one a process read last for ``SNAPSHOT_MAX_AGE``.

With the tag on every page a read per render would make reading the limit of one Redis; kept a
moment, the read load grows with the processes instead of the page views ("Reading" in
docs/how-it-works.md).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Final, TypeVar

from whos_online.backend import connection, keyspace
from whos_online.config.process import PerProcess
from whos_online.config.settings import get_config
from whos_online.flushing import flusher
from whos_online.recording.state import state_of
from whos_online.store import epochs, scripts, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from django.http import HttpRequest
    from redis.client import Pipeline
    from redis.cluster import ClusterPipeline

    from whos_online.backend.keyspace import Person
    from whos_online.config.settings import Config
    from whos_online.store.results import Snapshot

T = TypeVar("T")


def of_request(request: HttpRequest | None, room: str = "") -> Snapshot | None:
    """The snapshot (of the site, or of ``room``) an earlier tag of the same page, or the widget
    view, read, if any."""
    return None if request is None else state_of(request).snapshots.get(room)


def keep_on_request(request: HttpRequest, found: Snapshot, room: str = "") -> None:
    """Let every tag rendered for ``request`` show ``found`` instead of reading Redis again."""
    state_of(request).snapshots[room] = found


class SnapshotCache:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: When the kept snapshot was read (monotonic, for its age), and the snapshot.
        self._kept: tuple[float, Snapshot] | None = None

    def get(self, limit: int | None, max_age: float) -> Snapshot | None:
        """The kept snapshot, cut to ``limit`` names, if it is younger than ``max_age`` seconds
        and was read with at least ``limit`` names; None otherwise."""
        kept = self._kept
        if kept is None or max_age <= 0:
            return None
        read_at, found = kept
        if time.monotonic() - read_at >= max_age or not found.answers(limit):
            return None
        return found.cut(limit)

    def put(self, found: Snapshot) -> None:
        """Keep ``found`` for others: without what it says of the readers it looked for."""
        with self._lock:
            self._kept = (time.monotonic(), replace(found, readers={}))

    def invalidate(self) -> None:
        with self._lock:
            self._kept = None


#: Rooms whose last snapshot a process keeps: the busiest pages' rooms, the first to go being
#: the one read least recently.
ROOMS_KEPT: Final = 1024


class RoomCaches:
    """One ``SnapshotCache`` per room, for the ``ROOMS_KEPT`` rooms read most recently."""

    def __init__(self, size: int = ROOMS_KEPT) -> None:
        self._size = size
        self._caches: OrderedDict[str, SnapshotCache] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, room: str) -> SnapshotCache:
        with self._lock:
            found = self._caches.get(room)
            if found is None:
                found = self._caches[room] = SnapshotCache()
                while len(self._caches) > self._size:
                    self._caches.popitem(last=False)
            else:
                self._caches.move_to_end(room)
            return found

    def clear(self) -> None:
        with self._lock:
            self._caches.clear()


class _Kept:
    """What this process keeps of the snapshots it read: the site's, and its rooms'."""

    def __init__(self) -> None:
        self.site = SnapshotCache()
        self.rooms = RoomCaches()


_kept: Final = PerProcess(_Kept)


def cache_of(room: str) -> SnapshotCache:
    kept = _kept.get()
    return kept.rooms.of(room) if room else kept.site


def invalidate() -> None:
    """Drop every kept snapshot: a logout or an erasure must not be shown by the next pages."""
    kept = _kept.peek()
    if kept is not None:
        kept.site.invalidate()
        kept.rooms.clear()


def read(
    limit: int | None,
    *,
    max_age: float = 0,
    room: str = "",
    readers: Mapping[str, Sequence[Person]] | None = None,
) -> Snapshot | None:
    """Counts and the newest ``limit`` visible users of the site, or of ``room``; None if Redis
    could not be read.

    With ``max_age``, the snapshot this process read last is reused while it is younger than
    that. Each room's snapshot is kept apart (``ROOMS_KEPT`` of them).
    """
    return read_many(limit, [room], max_age=max_age, readers=readers)[room]


def read_many(
    limit: int | None,
    rooms: Sequence[str],
    *,
    max_age: float = 0,
    readers: Mapping[str, Sequence[Person]] | None = None,
) -> dict[str, Snapshot | None]:
    """``read`` of each of ``rooms`` ("" for the site): those not kept by this process are read
    together, in one round trip (one per shard on a cluster of several shards). Each room maps
    to its snapshot, or to None if Redis could not be read.

    The rooms of ``readers`` are read afresh, looking for those readers in them (the snapshot
    says whether it counts each: ``Snapshot.counts_reader``)."""
    sought = {room: list(people) for room, people in (readers or {}).items() if people}
    found: dict[str, Snapshot | None] = {}
    for room in rooms:
        found[room] = None if room in sought else cache_of(room).get(limit, max_age)
    missing = [room for room, kept in found.items() if kept is None]
    if not missing:
        return found
    now = time.time()
    config = get_config()
    read_now: Sequence[Snapshot | None]
    if config.redis_cluster and config.shards > 1:
        flusher.current().flush()
        read_now = [
            _read_by_shard(config, limit, now, room, sought.get(room, ())) for room in missing
        ]
    else:
        # The process's own queue is written first, in the same round trip: it sees its visits.
        read_now = flusher.current().flush_with(
            lambda client, config, before: snapshot.snapshots_after(
                client, config, before, limit=limit, now=now, rooms=missing, readers=sought
            ),
            [None] * len(missing),
        )
    for room, raw in zip(missing, read_now, strict=True):
        if raw is None:
            continue
        epochs.current().learn_all(raw.epochs)
        one = replace(raw, read_at=now)
        if max_age > 0:
            cache_of(room).put(one)
        found[room] = one
    return found


def _read_by_shard(
    config: Config, limit: int | None, now: float, room: str, readers: Sequence[Person]
) -> Snapshot | None:
    """One call per shard, each behind the breaker of its shard: a shard that fails counts as
    empty. A shard that ``snapshot.unfinished`` names is asked again for ``limit`` names."""
    shards = keyspace.layout(config)
    asked = snapshot.shard_limit(limit, len(shards))
    parts: dict[int, Snapshot] = {}
    for index, shard in enumerate(shards):
        found = _read_shard(config, shard, asked, now, room=room, readers=readers)
        if found is not None:
            parts[index] = found
    indexes = list(parts)
    for position in snapshot.unfinished([parts[index] for index in indexes], limit, asked):
        index = indexes[position]
        found = _read_shard(config, shards[index], limit, now, room=room, readers=readers)
        if found is not None:
            parts[index] = found
    return snapshot.combine(list(parts.values()), limit) if parts else None


def _read_shard(
    config: Config,
    shard: keyspace.Shard,
    limit: int | None,
    now: float,
    *,
    room: str,
    readers: Sequence[Person],
) -> Snapshot | None:
    mine = snapshot.readers_of(config, shard, readers)
    calls = [snapshot.snapshot_call(config, shard, limit=limit, now=now, room=room, readers=mine)]
    raw = connection.call(None, lambda client, _config: scripts.run(client, calls)[0], shard=shard)
    return None if raw is None else snapshot.parse_snapshot(raw, limit, shard, mine)


def read_after_own_visits(
    default: T, ask: Callable[[Pipeline | ClusterPipeline, Config], Callable[[list[Any]], T]]
) -> T:
    """A read of the commands ``ask`` queues (it returns what answers from their replies), after
    this process's queue is written in the same round trip, so that it sees its own visits;
    ``default`` if Redis failed."""
    return flusher.current().flush_with(
        lambda client, config, calls: scripts.run_then(
            client, calls, lambda pipe: ask(pipe, config)
        ),
        default,
    )
