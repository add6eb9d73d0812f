"""Where whos_online's keys live in Redis and what they are called: their hash tags, the shards
people are split over, the names of the presence keys, the one place that spells the strings
naming a person, and the removal of a test run's keys.

Every key starts with a Redis Cluster hash tag, so that the keys one script touches share a slot;
``SHARDS`` splits the people over tags whose slots spread evenly over a cluster
(docs/how-it-works.md, under the table of keys). Every other module names keys through here, so
that they all agree; a person's *key* and *member* are in the glossary of docs/how-it-works.md.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from datetime import date, timedelta
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

if TYPE_CHECKING:
    from collections.abc import Callable

    import redis
    from redis.cluster import RedisCluster

    from whos_online.backend.clients import Client
    from whos_online.config.settings import Config


T = TypeVar("T")


def key(config: Config, suffix: str) -> str:
    """A site-wide key, under the base tag."""
    return f"{{{config.key_prefix}}}:{suffix}"


@dataclass(frozen=True)
class Shard:
    """One of the ``SHARDS`` parts of the people online, and the hash tag of its keys."""

    index: int
    tag: str

    def key(self, suffix: str) -> str:
        return f"{{{self.tag}}}:{suffix}"

    @property
    def is_base(self) -> bool:
        """Whether this shard's keys share a slot with the site-wide keys (shard 0 always does)."""
        return self.index == 0


def slot(tag: str) -> int:
    return key_slot(tag.encode())


@functools.lru_cache(maxsize=16)
def shard_tags(prefix: str, count: int) -> tuple[str, ...]:
    """The hash tags of a layout of ``count`` shards; one shard keeps the base tag itself.

    Shard *i* gets the first tag ``prefix:i/count``, ``prefix:i/count~1``, … whose slot falls in
    its band: exactly the base tag's slot for shard 0, and a quarter of the slots between two
    shards for the others, so that the chosen slots stay near evenly spaced points.
    """
    if count == 1:
        return (prefix,)
    base = slot(prefix)
    spacing = REDIS_CLUSTER_HASH_SLOTS / count
    width = max(int(spacing) // 4, 1)
    tags = []
    for index in range(count):
        start = (base + round(index * spacing)) % REDIS_CLUSTER_HASH_SLOTS
        band = 1 if index == 0 else width
        attempt = 0
        while True:
            tag = f"{prefix}:{index}/{count}" + (f"~{attempt}" if attempt else "")
            if (slot(tag) - start) % REDIS_CLUSTER_HASH_SLOTS < band:
                break
            attempt += 1
        tags.append(tag)
    return tuple(tags)


def layout(config: Config, count: int | None = None) -> tuple[Shard, ...]:
    """The shards of the configured layout, or of a layout of ``count`` shards."""
    return _shards(config.key_prefix, config.shards if count is None else count)


@functools.lru_cache(maxsize=16)
def _shards(prefix: str, count: int) -> tuple[Shard, ...]:
    # Asked for on every request (a throttled one too): made once per layout.
    return tuple(Shard(index, tag) for index, tag in enumerate(shard_tags(prefix, count)))


def shard_of(config: Config, person: str) -> Shard:
    """The shard a person belongs to, by a stable hash of who they are (``u:<pk>`` for a user,
    the stored member for a guest or bot), the same in every process."""
    shards = _layout_of(config)
    if len(shards) == 1:
        return shards[0]
    return shards[bucket(person, len(shards))]


@functools.lru_cache(maxsize=8192)
def bucket(person: str, count: int) -> int:
    digest = hashlib.blake2b(person.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


class PerConfig(Generic[T]):
    """A value derived from a ``Config``, built once and kept while the same Config is in use.

    ``get_config()`` hands out one frozen Config until settings change, so an identity check is
    enough; ``functools.lru_cache`` would hash every field of the Config on every call, which is
    a couple of microseconds on every recorded request.
    """

    def __init__(self, build: Callable[[Config], T]) -> None:
        self._build = build
        self._last: tuple[Config, T] | None = None

    def __call__(self, config: Config) -> T:
        last = self._last
        if last is not None and last[0] is config:
            return last[1]
        value = self._build(config)
        self._last = (config, value)
        return value


_layout_of: Final = PerConfig(layout)


def text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


#: Keys SCAN looks at per call (its COUNT), and keys per UNLINK, when a prefix's keys are removed.
SCAN_COUNT: Final = 1000
UNLINK_CHUNK: Final = 500


def prefix_pattern(prefix: str) -> str:
    """The ``SCAN MATCH`` pattern of every key under ``prefix``: its base tag and its shards'
    tags, and no other prefix's (``{site}`` is not ``{site-b}``'s). ``KEY_PREFIX`` may hold
    characters that a pattern reads as wildcards; they are escaped."""
    return "{" + re.sub(r"([*?\[\]\\])", r"\\\1", prefix) + "[}:]*"


def remove_prefix(client: redis.Redis | RedisCluster, prefix: str) -> int:
    """Remove every key under ``prefix`` (a test process's, as it ends); returns how many there
    were. Found with ``SCAN MATCH`` (on every master of a cluster) and removed with ``UNLINK`` in
    chunks, which frees their memory off Redis's main thread; never ``KEYS``, which would stop a
    live Redis for the whole keyspace at once."""
    removed = 0
    chunk: list[Any] = []
    for key in client.scan_iter(match=prefix_pattern(prefix), count=SCAN_COUNT):
        chunk.append(key)
        if len(chunk) == UNLINK_CHUNK:
            removed += client.unlink(*chunk)
            chunk = []
    if chunk:
        removed += client.unlink(*chunk)
    return removed


#: Per shard: the HASH of who is in which room, the sorted set of rooms by their latest visit,
#: and how the keys of a room's sets begin (``room:<name>:<kind>``).
ROOMS_WHERE: Final = "rooms:where"
ROOMS_INDEX: Final = "rooms"
ROOM_PREFIX: Final = "room:"

#: The sorted sets of people and bots, by kind. ``hidden`` holds users who are counted, not named.
KINDS: Final = ("users", "hidden", "guests", "bots")


def user_key(shard: Shard, pk: str) -> str:
    return shard.key(f"user:{pk}")


#: How the keys begin that say when a user logged out or was erased (``gone:<pk>``, the time):
#: a visit of theirs from before, still on its way from a process, is not recorded.
GONE_PREFIX: Final = "gone:"


def gone_key(shard: Shard, pk: str) -> str:
    return shard.key(f"{GONE_PREFIX}{pk}")


def visitors_key(shard: Shard, day: date | str) -> str:
    text = day if isinstance(day, str) else day.isoformat()
    return shard.key(f"visitors:{text}")


def epoch_key(shard: Shard) -> str:
    """The random word a shard keeps while its data lasts (see ``whos_online.store.epochs``)."""
    return shard.key("epoch")


def changes_channel(config: Config) -> str:
    """The pub/sub channel on which flushes publish what they changed, for the live streams
    (``flushing.changes``), under the base tag: a channel is no key, but the tag keeps it
    the site's, and on a Cluster a sharded channel would live in the base tag's slot."""
    return key(config, "changes")


def score(now: float) -> str:
    """A time as the sorted sets hold it: Unix seconds, to the millisecond."""
    return f"{now:.3f}"


def user_shard(config: Config, pk: str) -> Shard:
    return shard_of(config, user_person_key(pk))


def member_shard(config: Config, kind: str, member: str) -> Shard:
    """The shard of a member of ``kind``'s set: users by their pk, guests and bots by member."""
    if kind in USER_KINDS:
        return user_shard(config, member)
    return shard_of(config, member)


def peak_key(config: Config) -> str:
    return key(config, "peak")


def room_key(shard: Shard, room: str, kind: str) -> str:
    return shard.key(f"{ROOM_PREFIX}{room}:{kind}")


#: Per person: the sorted set of their connections in rooms (``links:<person key>``; member: the
#: room, the byte 0xFF that no room name holds, the connection; score: its last renewal).
LINKS_PREFIX: Final = "links:"


def links_key(shard: Shard, person: str) -> str:
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
    for shard in layout(config, shards):
        for name in (*KINDS, ROOMS_INDEX, ROOMS_WHERE):
            pipe.exists(shard.key(name))
    return not any(pipe.execute())


def forget_layout(client: Client, config: Config, shards: int) -> None:
    """Forget the layout of ``shards`` shards, emptied: its record and, unless it is the
    configured one, the epoch words of its shards, so that none of its keys lives for ever."""
    pipe = client.pipeline(transaction=False)
    pipe.srem(layouts_key(config), shards)
    if shards != config.shards:
        for shard in layout(config, shards):
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
