"""Rooms' titles for people: a HASH of room name to title, under the base tag.

A room's name is its identity ("page:4"); a title is what the dashboard shows of it ("About
us"). Titles come from the requests that enter rooms (``set_room(..., title=)``, a ``ROOMS``
title pattern or function), are written by the process's flusher once per process and title,
and leave with their room: the cleanup command takes away the titles of rooms that no shard
lists any more, a page of them at a time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from whos_online.backend import keyspace
from whos_online.store.keys import ROOMS_INDEX, key

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from whos_online.backend.connection import Client
    from whos_online.config.settings import Config

#: The HASH's suffix.
TITLES: Final = "room-titles"
#: Titles the cleanup looks at per round trip.
PAGE_SIZE: Final = 500


def titles_key(config: Config) -> str:
    return key(config, TITLES)


def write(client: Client, config: Config, titles: Mapping[str, str]) -> None:
    """Set the titles of the rooms ``titles`` names."""
    if titles:
        mapping: dict[Any, Any] = dict(titles)  # redis-py's stubs want a wider (invariant) type
        client.hset(titles_key(config), mapping=mapping)


def read(client: Client, config: Config, rooms: Iterable[str]) -> dict[str, str]:
    """The titles of ``rooms`` that have one."""
    wanted = list(rooms)
    if not wanted:
        return {}
    found = client.hmget(titles_key(config), wanted)
    return {room: keyspace.text(title) for room, title in zip(wanted, found, strict=True) if title}


def prune(client: Client, config: Config) -> int:
    """Take away the titles of rooms that no shard's index lists (rooms the cleanup emptied);
    returns how many went."""
    hash_key = titles_key(config)
    indexes = [shard.key(ROOMS_INDEX) for shard in keyspace.layout(config)]
    removed = 0
    cursor = 0
    while True:
        cursor, page = client.hscan(hash_key, cursor, count=PAGE_SIZE)
        rooms = [keyspace.text(room) for room in page]
        if rooms:
            pipe = client.pipeline(transaction=False)
            for room in rooms:
                for index in indexes:
                    pipe.zscore(index, room)
            scores = pipe.execute()
            per_room = len(indexes)
            gone = [
                room
                for number, room in enumerate(rooms)
                if all(
                    found is None for found in scores[number * per_room : (number + 1) * per_room]
                )
            ]
            if gone:
                removed += int(client.hdel(hash_key, *gone))
        if not cursor:
            return removed
