"""What the cleanup command removes, a step at a time: people gone from the sets and the rooms.

Each step is bounded (``PRUNE_CHUNK_SIZE`` members, ``ROOMS_PAGE_SIZE`` rooms), so that removing
a million members never keeps Redis busy for long; the command and the API's ``prune`` loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from whos_online.backend import keyspace
from whos_online.backend.keyspace import (
    KINDS,
    ROOM_PREFIX,
    ROOMS_INDEX,
    ROOMS_WHERE,
    forget_layout,
    layout_is_empty,
    layouts_known,
    layouts_seen,
    room_key,
    score,
)
from whos_online.store import lua, scripts, snapshot

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from whos_online.backend.clients import Client
    from whos_online.config.settings import Config

    OnGone = Callable[[str, list[str]], object]
    from whos_online.store.results import Snapshot


#: Rooms of one shard read from its index per step of the cleanup (one script call): 1–2 ms of
#: Redis time for a page of empty rooms, about 5 ms when each still holds someone to remove.
ROOMS_PAGE_SIZE: Final = 200


#: Members removed per prune call: about a millisecond of Redis time each.
PRUNE_CHUNK_SIZE: Final = 1000


def count_stale(
    client: Client, config: Config, *, now: float, shards: int | None = None
) -> dict[str, int]:
    cutoff = "(" + score(now - config.window)
    layout = keyspace.layout(config, shards)
    pipe = client.pipeline(transaction=False)
    for shard in layout:
        for kind in KINDS:
            pipe.zcount(shard.key(kind), "-inf", cutoff)
    found = [int(count) for count in pipe.execute()]
    return {kind: sum(found[index :: len(KINDS)]) for index, kind in enumerate(KINDS)}


def prune_chunk(
    client: Client,
    config: Config,
    kind: str,
    *,
    now: float,
    shard: keyspace.Shard | None = None,
) -> list[str]:
    """Remove up to ``PRUNE_CHUNK_SIZE`` members of ``kind`` last seen before the window, from
    ``shard`` (by default the first of the configured layout)."""
    shard = keyspace.layout(config)[0] if shard is None else shard
    removed = scripts.call(
        client,
        lua.PRUNE_CHUNK,
        [shard.key(kind)],
        args=[score(now - config.window), PRUNE_CHUNK_SIZE],
    )
    return [keyspace.text(member) for member in removed]


@dataclass(frozen=True)
class RoomsPage:
    """What one step of the walk over a shard's index of rooms did, and where the next goes on."""

    cursor: str
    removed: int
    emptied: int
    done: bool


def prune_rooms_page(
    client: Client, config: Config, shard: keyspace.Shard, cursor: str, *, now: float
) -> RoomsPage:
    """Prune the page of ``shard``'s rooms at ``cursor`` (``"0"`` for the first): up to
    ``ROOMS_PAGE_SIZE`` rooms and ``PRUNE_CHUNK_SIZE`` members, the emptied rooms out of the
    index, in one script call of a few milliseconds at most.

    A call per page, not per room: a flood of rooms with nobody left in them is what the index
    holds after a crawler walked the site's rooms, and costs a few microseconds each this way.
    """
    next_cursor, removed, emptied, done = scripts.call(
        client,
        lua.PRUNE_ROOMS,
        [shard.key(ROOMS_INDEX), shard.key(ROOMS_WHERE)],
        args=[
            shard.key(ROOM_PREFIX),
            score(now - config.window),
            cursor,
            ROOMS_PAGE_SIZE,
            PRUNE_CHUNK_SIZE,
        ],
    )
    return RoomsPage(keyspace.text(next_cursor), int(removed), int(emptied), bool(done))


def prune_with(
    client: Client,
    config: Config,
    *,
    now: float,
    on_gone: OnGone | None = None,
    between_chunks: Callable[[], object] | None = None,
    into: dict[str, int] | None = None,
) -> dict[str, int]:
    """Prune the configured layout in chunks; returns how many members of each kind went.

    ``on_gone`` hears of each chunk's removals; ``between_chunks`` is called after each chunk
    and its report: the command extends its lock there, and stops there when asked to, so that
    no removed user goes unreported. ``into``, when given, is what is returned, counted chunk by
    chunk: a caller that ``between_chunks`` stops by raising still knows what went.
    """
    removed_by_kind = _counts_by_kind(into)
    _prune_layout(
        client,
        config,
        keyspace.layout(config),
        now=now,
        removed_by_kind=removed_by_kind,
        on_gone=on_gone,
        between_chunks=between_chunks,
    )
    return removed_by_kind


def _prune_layout(
    client: Client,
    config: Config,
    layout: Sequence[keyspace.Shard],
    *,
    now: float,
    removed_by_kind: dict[str, int],
    on_gone: OnGone | None = None,
    between_chunks: Callable[[], object] | None = None,
) -> None:
    for shard in layout:
        for kind in KINDS:
            _prune_set(
                client,
                config,
                shard,
                kind,
                now=now,
                removed_by_kind=removed_by_kind,
                on_gone=on_gone,
                between_chunks=between_chunks,
            )


def _prune_set(
    client: Client,
    config: Config,
    shard: keyspace.Shard,
    kind: str,
    *,
    now: float,
    removed_by_kind: dict[str, int],
    on_gone: OnGone | None = None,
    between_chunks: Callable[[], object] | None = None,
) -> None:
    """Prune one set in chunks, each reported to ``on_gone``."""
    while True:
        removed = prune_chunk(client, config, kind, now=now, shard=shard)
        removed_by_kind[kind] = removed_by_kind.get(kind, 0) + len(removed)
        if on_gone is not None and removed:
            on_gone(kind, removed)
        if between_chunks is not None:
            between_chunks()
        if len(removed) < PRUNE_CHUNK_SIZE:
            break


def prune_old_layouts(
    client: Client,
    config: Config,
    *,
    now: float,
    between_chunks: Callable[[], object] | None = None,
    into: dict[str, int] | None = None,
) -> dict[str, int]:
    """Prune what layouts of another ``SHARDS`` left, and forget a layout once none of its sets
    is left (``between_chunks`` and ``into`` as for ``prune_with``).

    Nobody reads an old layout, so its members are not counted; they are pruned like the current
    ones, once stale, rather than all at once, so that a process still running with the old
    setting during a deploy loses nobody. Nor are they reported: a member left in an old layout
    is online in the new one, or was already reported by the earlier runs.
    """
    removed_by_kind = _counts_by_kind(into)
    old = layouts_seen(client, config)[1:]
    for shards in old:
        old_layout = keyspace.layout(config, shards)
        _prune_layout(
            client,
            config,
            old_layout,
            now=now,
            removed_by_kind=removed_by_kind,
            between_chunks=between_chunks,
        )
        prune_rooms(client, config, now=now, between_chunks=between_chunks, layout=old_layout)
        if layout_is_empty(client, config, shards):
            forget_layout(client, config, shards)
    if old and config.shards == 1 and layouts_known(client, config) == [1]:
        # Back to the one-shard layout and the others emptied: keep no record, as before.
        forget_layout(client, config, 1)
    return removed_by_kind


def _counts_by_kind(into: dict[str, int] | None) -> dict[str, int]:
    """A count of 0 for each kind of member, in ``into`` if given."""
    counts = {} if into is None else into
    for kind in KINDS:
        counts.setdefault(kind, 0)
    return counts


@dataclass
class RoomsPruned:
    """What ``prune_rooms`` did, counted page by page."""

    #: Memberships of people gone for over the window, taken out of rooms.
    people: int = 0
    #: Rooms left with nobody, and so deleted.
    emptied: int = 0


def count_rooms(client: Client, config: Config, *, now: float) -> tuple[int, int]:
    """What ``prune_rooms`` would do now, without doing it: how many people it would take out of
    rooms, and how many rooms it would leave with nobody (and delete).

    Visits the same rooms, those the shards' indexes name, a page of them per round trip: two
    ZCOUNTs per set of each room (the stale members, and the others), each O(log n).
    """
    cutoff = f"{now - config.window:.3f}"  # as precise as the prune script's cutoff
    people = emptied = 0
    per_room = 2 * len(KINDS)
    page = ROOMS_PAGE_SIZE
    for shard in keyspace.layout(config):
        # ZSCAN may name a room twice.
        index = shard.key(ROOMS_INDEX)
        scanned = client.zscan_iter(index, count=page)
        rooms = list(dict.fromkeys(keyspace.text(room) for room, _score in scanned))
        for start in range(0, len(rooms), page):
            pipe = client.pipeline(transaction=False)
            for room in rooms[start : start + page]:
                for kind in KINDS:
                    key = room_key(shard, room, kind)
                    pipe.zcount(key, "-inf", f"({cutoff}")
                    pipe.zcount(key, cutoff, "+inf")
            found = [int(count) for count in pipe.execute()]
            for first in range(0, len(found), per_room):
                counts = found[first : first + per_room]
                people += sum(counts[0::2])
                emptied += not any(counts[1::2])
    return people, emptied


def sample_counts(client: Client, config: Config, *, now: float) -> Snapshot | None:
    """Raise the peak and sample the ``online:*`` counters from counts over every shard (the
    command does so when ``SHARDS`` > 1, where a visit cannot count the whole site)."""
    if config.shards == 1:
        return None
    found = snapshot.snapshot(client, config, limit=0, now=now)
    snapshot.sample(client, config, found, now=now)
    return found


def prune_rooms(
    client: Client,
    config: Config,
    *,
    now: float,
    between_chunks: Callable[[], object] | None = None,
    layout: Sequence[keyspace.Shard] | None = None,
    into: RoomsPruned | None = None,
) -> tuple[int, int]:
    """Take people gone for over the window out of the rooms, a page of rooms at a time; returns
    how many memberships went, and how many rooms were left empty (and leave no key).

    Only the rooms of the shards' indexes are visited: those someone was in since the cleanup
    last emptied them, so the work grows with the rooms in use, not with every room there was.
    People who went offline leave the online sets through ``prune_with``; this only keeps the
    rooms' sets from holding them. ``between_chunks`` runs after every page, whether or not it
    removed anyone: a walk over a flood of empty rooms removes no one for a long while, and the
    command must still keep its lock and hear a stop signal meanwhile. ``into``, when given, is
    counted page by page (as for ``prune_with``).
    """
    pruned = RoomsPruned() if into is None else into
    for shard in keyspace.layout(config) if layout is None else layout:
        cursor = "0"
        while True:
            page = prune_rooms_page(client, config, shard, cursor, now=now)
            pruned.people += page.removed
            pruned.emptied += page.emptied
            if between_chunks is not None:
                between_chunks()
            if page.done:
                break
            cursor = page.cursor
    return pruned.people, pruned.emptied
