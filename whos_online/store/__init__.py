"""The Redis keys and commands of presence: who is online, where, the peak and the visitors.

One module per concern, each importing only those listed before it:

- ``keys``: the names of the keys and which shard holds a person's, and the layouts seen;
- ``scripts``: running the Lua scripts of ``whos_online.store.lua``, several in one round trip;
- ``items``: a visit to record, and how it places its person among the rooms;
- ``record``: the record script's batches of visits (the one call a flush makes per shard),
  and what those calls answer (who arrived, the rooms changed);
- ``presence``: whether given users are online, and taking one off;
- ``snapshot``: one read of the site or a room, combined over the shards;
- ``site``: the all-time peak and the day's unique visitors;
- ``titles``: rooms' titles for people;
- ``cleanup``: removing the people gone, a chunk at a time.

Writes that belong together go out in one round trip: a Lua script where the work must be atomic
or reads what it writes, a pipeline otherwise. Nothing here is O(number of people online) except
``cleanup.prune_chunk``, which is bounded by its chunk size, and ``snapshot.snapshot(limit=None)``,
which the API documents as a full listing.

Beside them: ``users`` (a user's display data),
``text`` (what a name may carry onto a page), ``results`` (what reads return), ``epochs`` (the
word a shard keeps while its data lasts), ``counters`` (counters at several precisions),
``pruning`` (the cleanup's chunks) and ``lua`` (the scripts, one file each).

Functions take the client explicitly: the request path passes its short-timeout client and lets
the caller fail open; the cleanup command passes a patient one and lets errors surface.
"""

from __future__ import annotations

from whos_online.store import cleanup, items, keys, presence, record, scripts, snapshot

__all__ = [
    "cleanup",
    "items",
    "keys",
    "presence",
    "record",
    "scripts",
    "site",
    "snapshot",
    "titles",
]
