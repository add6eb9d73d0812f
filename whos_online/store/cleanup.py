"""What the cleanup command removes, a step at a time: people gone from the sets and the rooms.

Each call is bounded by ``PRUNE_CHUNK_SIZE`` members, and a rooms' call by ``ROOMS_PAGE_SIZE``
rooms too, so that removing a million members or walking a million rooms never keeps Redis busy
for long; ``whos_online.store.pruning`` loops over the steps and reports what went.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from whos_online.backend import keyspace
from whos_online.store import lua, scripts
from whos_online.store.keys import KINDS, ROOM_PREFIX, ROOMS_INDEX, ROOMS_WHERE, score

if TYPE_CHECKING:
    from whos_online.backend.connection import Client
    from whos_online.config.settings import Config


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
