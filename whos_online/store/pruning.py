"""Removing people gone from the online sets, in chunks, and what the cleanup command keeps.

Used by the cleanup command with its patient client, letting Redis errors propagate, and by the
API's ``prune`` behind the breaker. Who went is handed to ``on_gone`` once per chunk, so that a
huge prune never holds every id at once: the callers forget them in the process's memory of
recent visitors and send ``users_went_offline`` (``whos_online.signals.reporter``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from whos_online import store
from whos_online.backend import keyspace

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    #: Called with a kind of member ("users", "hidden", "guests", "bots") and those of that kind
    #: a chunk took off the online sets.
    OnGone = Callable[[str, list[str]], object]

    from whos_online.backend.connection import Client
    from whos_online.config.settings import Config
    from whos_online.store.results import Snapshot


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
        for kind in store.keys.KINDS:
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
        removed = store.cleanup.prune_chunk(client, config, kind, now=now, shard=shard)
        removed_by_kind[kind] = removed_by_kind.get(kind, 0) + len(removed)
        if on_gone is not None and removed:
            on_gone(kind, removed)
        if between_chunks is not None:
            between_chunks()
        if len(removed) < store.cleanup.PRUNE_CHUNK_SIZE:
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
    old = store.keys.layouts_seen(client, config)[1:]
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
        if store.keys.layout_is_empty(client, config, shards):
            store.keys.forget_layout(client, config, shards)
    if old and config.shards == 1 and store.keys.layouts_known(client, config) == [1]:
        # Back to the one-shard layout and the others emptied: keep no record, as before.
        store.keys.forget_layout(client, config, 1)
    return removed_by_kind


def _counts_by_kind(into: dict[str, int] | None) -> dict[str, int]:
    """A count of 0 for each kind of member, in ``into`` if given."""
    counts = {} if into is None else into
    for kind in store.keys.KINDS:
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
    per_room = 2 * len(store.keys.KINDS)
    page = store.cleanup.ROOMS_PAGE_SIZE
    for shard in keyspace.layout(config):
        # ZSCAN may name a room twice.
        index = shard.key(store.keys.ROOMS_INDEX)
        scanned = client.zscan_iter(index, count=page)
        rooms = list(dict.fromkeys(keyspace.text(room) for room, _score in scanned))
        for start in range(0, len(rooms), page):
            pipe = client.pipeline(transaction=False)
            for room in rooms[start : start + page]:
                for kind in store.keys.KINDS:
                    key = store.keys.room_key(shard, room, kind)
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
    found = store.snapshot.snapshot(client, config, limit=0, now=now)
    store.snapshot.sample(client, config, found, now=now)
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
            page = store.cleanup.prune_rooms_page(client, config, shard, cursor, now=now)
            pruned.people += page.removed
            pruned.emptied += page.emptied
            if between_chunks is not None:
                between_chunks()
            if page.done:
                break
            cursor = page.cursor
    return pruned.people, pruned.emptied
