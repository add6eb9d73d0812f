"""The names of the presence keys in Redis, the layouts of shards that may hold them, and the
one place that spells the strings naming a person.

Every other module of ``store`` names keys through here, so that they all agree; a person's *key*
and *member* are in the glossary of docs/how-it-works.md.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import date, timedelta
from typing import TYPE_CHECKING, Final

from whos_online.backend import keyspace

if TYPE_CHECKING:
    from whos_online.backend.clients import Client
    from whos_online.config.settings import Config


#: Per shard: the HASH of who is in which room, the sorted set of rooms by their latest visit,
#: and how the keys of a room's sets begin (``room:<name>:<kind>``).
ROOMS_WHERE: Final = "rooms:where"
ROOMS_INDEX: Final = "rooms"
ROOM_PREFIX: Final = "room:"

#: The sorted sets of people and bots, by kind. ``hidden`` holds users who are counted, not named.
KINDS: Final = ("users", "hidden", "guests", "bots")


def key(config: Config, suffix: str) -> str:
    """A site-wide key (under the base tag)."""
    return keyspace.key(config, suffix)


def user_key(shard: keyspace.Shard, pk: str) -> str:
    return shard.key(f"user:{pk}")


#: How the keys begin that say when a user logged out or was erased (``gone:<pk>``, the time):
#: a visit of theirs from before, still on its way from a process, is not recorded.
GONE_PREFIX: Final = "gone:"


def gone_key(shard: keyspace.Shard, pk: str) -> str:
    return shard.key(f"{GONE_PREFIX}{pk}")


def visitors_key(shard: keyspace.Shard, day: date | str) -> str:
    text = day if isinstance(day, str) else day.isoformat()
    return shard.key(f"visitors:{text}")


def epoch_key(shard: keyspace.Shard) -> str:
    """The random word a shard keeps while its data lasts (see ``whos_online.store.epochs``)."""
    return shard.key("epoch")


def changes_channel(config: Config) -> str:
    """The pub/sub channel on which flushes publish what they changed, for the live streams
    (``flushing.changes``), under the base tag: a channel is no key, but the tag keeps it
    the site's, and on a Cluster a sharded channel would live in the base tag's slot."""
    return keyspace.key(config, "changes")


def score(now: float) -> str:
    """A time as the sorted sets hold it: Unix seconds, to the millisecond."""
    return f"{now:.3f}"


def user_shard(config: Config, pk: str) -> keyspace.Shard:
    return keyspace.shard_of(config, user_person_key(pk))


def member_shard(config: Config, kind: str, member: str) -> keyspace.Shard:
    """The shard of a member of ``kind``'s set: users by their pk, guests and bots by member."""
    if kind in USER_KINDS:
        return user_shard(config, member)
    return keyspace.shard_of(config, member)


def peak_key(config: Config) -> str:
    return key(config, "peak")


def room_key(shard: keyspace.Shard, room: str, kind: str) -> str:
    return shard.key(f"{ROOM_PREFIX}{room}:{kind}")


#: Per person: the sorted set of their connections in rooms (``links:<person key>``; member: the
#: room, the byte 0xFF that no room name holds, the connection; score: its last renewal).
LINKS_PREFIX: Final = "links:"


def links_key(shard: keyspace.Shard, person: str) -> str:
    return shard.key(f"{LINKS_PREFIX}{person}")


#: The shard counts of the layouts the cleanup command has seen, so that it can empty an old one.
def layouts_key(config: Config) -> str:
    return key(config, "layouts")


def layouts_seen(client: Client, config: Config) -> list[int]:
    """Register the configured layout and return every layout seen, the configured one first.

    The one-shard layout counts as seen: it is where every site starts. A site that never
    changed ``SHARDS`` from 1 keeps no record at all.
    """
    if config.shards != 1:
        client.sadd(layouts_key(config), 1, config.shards)
    return layouts_known(client, config)


def layouts_known(client: Client, config: Config) -> list[int]:
    """Every layout that may hold data, the configured one first: the one-shard layout, where
    every site starts, and those the site's processes (each registers the layout it writes in)
    and the cleanup have seen."""
    seen = {int(each) for each in client.smembers(layouts_key(config))} | {1}
    return [config.shards, *sorted(seen - {config.shards})]


def layout_is_empty(client: Client, config: Config, shards: int) -> bool:
    """Whether no sorted set of people, and nothing of a room, is left in the layout of
    ``shards`` shards."""
    pipe = client.pipeline(transaction=False)
    for shard in keyspace.layout(config, shards):
        for name in (*KINDS, ROOMS_INDEX, ROOMS_WHERE):
            pipe.exists(shard.key(name))
    return not any(pipe.execute())


def forget_layout(client: Client, config: Config, shards: int) -> None:
    """Forget the layout of ``shards`` shards, emptied: its record and, unless it is the
    configured one, the epoch words of its shards, so that none of its keys lives for ever."""
    pipe = client.pipeline(transaction=False)
    pipe.srem(layouts_key(config), shards)
    if shards != config.shards:
        for shard in keyspace.layout(config, shards):
            pipe.delete(epoch_key(shard))
    pipe.execute()


#: The first UTC day of Unix time: day numbers count from it.
_DAY_ZERO: Final = date(1970, 1, 1)


def utc_day(now: float) -> str:
    """The UTC day of ``now`` as ISO text, as keys and pseudonyms are made from it."""
    return _day_text(int(now // 86400))


@functools.lru_cache(maxsize=4)
def _day_text(day_number: int) -> str:
    # Worked out once a day rather than through a datetime up to three times per recorded visit.
    return (_DAY_ZERO + timedelta(days=day_number)).isoformat()


#: The sets of users, shown or hidden.
USER_KINDS: Final = frozenset({"users", "hidden"})


@dataclass(frozen=True)
class Person:
    """Someone in an online set: ``kind`` is the set ("users", "hidden", "guests" or "bots"),
    ``member`` their member in it (a user's pk as text, a guest's or bot's pseudonym)."""

    kind: str
    member: str

    @property
    def key(self) -> str:
        return person_key(self.kind, self.member)

    @property
    def is_user(self) -> bool:
        return self.kind in USER_KINDS


def person_key(kind: str, member: str) -> str:
    """The key of the member ``member`` of set ``kind`` (see the module's docstring)."""
    return user_person_key(member) if kind in USER_KINDS else f"{kind}:{member}"


def user_person_key(pk: str) -> str:
    """The key of the user whose pk is ``pk``, hidden or not."""
    return f"u:{pk}"


def former_guest_keys(member: str) -> list[str]:
    """The keys a guest (or a bot) with ``member`` was known by, before they logged in."""
    return [person_key("guests", member), person_key("bots", member)]
