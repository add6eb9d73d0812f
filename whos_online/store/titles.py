"""Rooms' titles for people: per shard, a HASH of room name to title beside the HASH of who is
where (``rooms:titles``).

A room's name is its identity ("page:4"); a title is what the dashboard shows of it ("About
us"). Titles come from the requests that enter rooms (``set_room(..., title=)``, a ``ROOMS``
title pattern or function): the record script sets a room's title as someone enters it
(``lua/record.lua``), and the cleanup takes it away when it takes the room out of the shard's
index (``lua/prune_rooms.lua``). So a title lives as long as its room does, comes back with the
next visitor after Redis lost its data, and costs no command of its own.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from whos_online.backend import keyspace
from whos_online.store.keys import ROOMS_WHERE

if TYPE_CHECKING:
    from collections.abc import Iterable

    from whos_online.backend.connection import Client
    from whos_online.config.settings import Config

#: The HASH's suffix: the scripts name it from the HASH of who is where, beside it.
ROOMS_TITLES: Final = ROOMS_WHERE.removesuffix("where") + "titles"


def read(client: Client, config: Config, rooms: Iterable[str]) -> dict[str, str]:
    """The titles of ``rooms`` that have one, from every shard, in one round trip (a room is in
    the shards of the people in it; its title is the same in each)."""
    wanted = list(rooms)
    if not wanted:
        return {}
    shards = keyspace.layout(config)
    pipe = client.pipeline(transaction=False)
    for shard in shards:
        pipe.hmget(shard.key(ROOMS_TITLES), wanted)
    found: dict[str, str] = {}
    for titles in pipe.execute():
        for room, title in zip(wanted, titles, strict=True):
            if title and room not in found:
                found[room] = keyspace.text(title)
    return found
