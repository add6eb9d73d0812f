"""What one flush sends: the queue's visits and the page hits, made into script calls shard by
shard, and the replies handed back group by group.

Each shard's entries go in one call of its record script (``store.record.batch_calls``), which
loops over them. The base shard's call, the one whose slot holds the site-wide keys, also carries
the page hits and the layout the process registers: never a call of its own.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from whos_online import store
from whos_online.backend import connection, keyspace
from whos_online.flushing import hits
from whos_online.store import epochs
from whos_online.store.items import Link, Visit
from whos_online.store.record import Entry, Extras, entries_of, leave_room_entry, link_entry

if TYPE_CHECKING:
    from collections.abc import Sequence

    from whos_online.backend.connection import Client
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
    """One shard's part of a flush: its entries and the calls that write them."""

    shard: keyspace.Shard
    entries: list[Entry] = field(default_factory=list)
    calls: list[ScriptCall] = field(default_factory=list)


@dataclass
class Prepared:
    groups: list[Group]
    hits: hits.Batch | None
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
    batch: hits.Batch | None,
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
        group.calls = store.record.batch_calls(
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
        return store.scripts.run(client, calls)

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
    return {(hits.COUNTER_NAME, second): count for second, count in counts.items()}


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
