"""What the cleanup command removes, a chunk at a time: people gone from the sets and the rooms.

Each call is bounded by ``PRUNE_CHUNK_SIZE``, so that removing a million members never keeps
Redis busy for long; ``whos_online.pruning`` loops over the chunks and reports what went.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from whos_online import keyspace, lua
from whos_online.store.keys import KINDS, ROOMS_INDEX, ROOMS_WHERE, room_key, score

if TYPE_CHECKING:
    from collections.abc import Iterator

    from whos_online.conf import Config
    from whos_online.connection import Client


#: Rooms of one shard read from its index per step of the cleanup.
ROOMS_PAGE_SIZE: Final = 500


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
    removed = keyspace.script(client, lua.PRUNE_CHUNK)(
        keys=[shard.key(kind)], args=[score(now - config.window), PRUNE_CHUNK_SIZE]
    )
    return [keyspace.text(member) for member in removed]


def rooms_of(client: Client, shard: keyspace.Shard) -> Iterator[str]:
    """The rooms the index of ``shard`` names: those with someone in them, or left since the
    cleanup last ran. A page at a time (ZSCAN, which may name a room twice)."""
    for room, _score in client.zscan_iter(shard.key(ROOMS_INDEX), count=ROOMS_PAGE_SIZE):
        yield keyspace.text(room)


def prune_room_chunk(
    client: Client, config: Config, shard: keyspace.Shard, room: str, *, now: float
) -> tuple[int, bool]:
    """Take up to ``PRUNE_CHUNK_SIZE`` people gone for over the window out of ``room`` in
    ``shard``; returns how many, and whether the room is gone (emptied, and out of the index)."""
    keys = [room_key(shard, room, kind) for kind in KINDS]
    keys += [shard.key(ROOMS_WHERE), shard.key(ROOMS_INDEX)]
    removed, gone = keyspace.script(client, lua.PRUNE_ROOM)(
        keys=keys, args=[score(now - config.window), PRUNE_CHUNK_SIZE, room]
    )
    return int(removed), bool(gone)
