"""Where whos_online's keys live in Redis: their hash tags, the shards people are split over, and
the removal of a test run's keys.

Every key starts with a Redis Cluster hash tag, so that the keys one script touches share a slot;
``SHARDS`` splits the people over tags whose slots spread evenly over a cluster
(docs/how-it-works.md, under the table of keys).
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, Generic, TypeVar

from redis.crc import REDIS_CLUSTER_HASH_SLOTS, key_slot

if TYPE_CHECKING:
    from collections.abc import Callable

    import redis
    from redis.cluster import RedisCluster

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
