"""Every Redis key and command whos_online uses.

All keys sit under ``{KEY_PREFIX}:`` — the braces make the prefix a Redis Cluster hash tag, so all
keys share one slot and the Lua scripts and transactions below work on a cluster as well.

Writes that belong together go out in one round trip: a Lua script where the work must be atomic
or reads what it writes, a pipeline otherwise. Nothing here is O(number of people online) except
``prune_chunk``, which is bounded by its chunk size, and ``snapshot(limit=None)``, which the API
documents as a full listing.

Functions take the client explicitly: the request path passes its short-timeout client and lets
the caller fail open; the cleanup command passes a patient one and lets errors surface.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Sequence

    import redis
    from redis.commands.core import Script

    from whos_online.conf import Config

#: The sorted sets of people and bots, by kind. ``hidden`` holds users who are counted, not named.
KINDS: Final = ("users", "hidden", "guests", "bots")

# Joining a set and updating the display HASH must happen together, or a concurrent prune could
# leave a listed user without a name. Leaving the other user set covers HIDE_USER changing its
# answer; leaving the guest set makes a login move the visitor from "guest" to "user" at once.
_RECORD_USER: Final = """
redis.call('ZADD', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZREM', KEYS[2], ARGV[2])
redis.call('HSET', KEYS[3], 'name', ARGV[4], 'url', ARGV[5], 'seen', ARGV[1])
redis.call('EXPIRE', KEYS[3], ARGV[3])
if ARGV[6] ~= '' then
  redis.call('ZREM', KEYS[4], ARGV[6])
end
return 1
"""

# Counts of every kind and the newest LIMIT visible users with their display data, in one
# round trip. The per-user HASHes are not in KEYS because their names are only known once the
# range is read; they share the hash tag, so they live in the same cluster slot.
_SNAPSHOT: Final = """
local min = ARGV[1]
local result = {}
for i = 1, 4 do
  result[i] = redis.call('ZCOUNT', KEYS[i], min, '+inf')
end
local listed = {}
local limit = tonumber(ARGV[2])
if limit ~= 0 then
  local ids = redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', min, 'WITHSCORES', 'LIMIT', 0, limit)
  for i = 1, #ids, 2 do
    local info = redis.call('HMGET', ARGV[3] .. ids[i], 'name', 'url')
    listed[#listed + 1] = {ids[i], ids[i + 1], info[1] or '', info[2] or ''}
  end
end
result[5] = listed
return result
"""

# Reading and removing a chunk in one script keeps a member that is seen again between the two
# steps from being removed while online, and keeps each call short enough not to stall Redis.
_PRUNE_CHUNK: Final = """
local stale = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, ARGV[2])
if #stale > 0 then
  redis.call('ZREM', KEYS[1], unpack(stale))
end
return stale
"""

#: Members removed per prune call: about a millisecond of Redis time each.
PRUNE_CHUNK_SIZE: Final = 1000


@functools.lru_cache(maxsize=64)
def _script(client: redis.Redis, source: str) -> Script:
    # One Script per client and source keeps the SHA1 from being recomputed on every request.
    return client.register_script(source)


def key(config: Config, suffix: str) -> str:
    return f"{{{config.key_prefix}}}:{suffix}"


def user_key(config: Config, pk: str) -> str:
    return key(config, f"user:{pk}")


def _score(now: float) -> str:
    return f"{now:.3f}"


@dataclass(frozen=True)
class ListedUser:
    pk: str
    seen: float
    name: str
    url: str


@dataclass(frozen=True)
class Snapshot:
    visible: int
    hidden: int
    guests: int
    bots: int
    listed: list[ListedUser]


def record_user(
    client: redis.Redis,
    config: Config,
    *,
    pk: str,
    hidden: bool,
    name: str,
    url: str,
    now: float,
    former_guest: str = "",
) -> None:
    target, other = ("hidden", "users") if hidden else ("users", "hidden")
    _script(client, _RECORD_USER)(
        keys=[
            key(config, target),
            key(config, other),
            user_key(config, pk),
            key(config, "guests"),
        ],
        args=[_score(now), pk, config.last_seen_days * 86400, name, url, former_guest],
    )


def record_member(
    client: redis.Redis, config: Config, *, kind: str, member: str, now: float
) -> None:
    """Record a guest or a bot."""
    client.zadd(key(config, kind), {member: _score(now)})


def remove_user(client: redis.Redis, config: Config, pk: str, *, erase: bool = False) -> None:
    """Take a user off the online list; with ``erase``, also drop their last-seen record."""
    pipe = client.pipeline(transaction=True)
    pipe.zrem(key(config, "users"), pk)
    pipe.zrem(key(config, "hidden"), pk)
    if erase:
        pipe.delete(user_key(config, pk))
    pipe.execute()


def snapshot(client: redis.Redis, config: Config, *, limit: int | None, now: float) -> Snapshot:
    raw: Sequence[Any] = _script(client, _SNAPSHOT)(
        keys=[key(config, kind) for kind in KINDS],
        args=[
            _score(now - config.window),
            -1 if limit is None else limit,
            key(config, "user:"),
        ],
    )
    visible, hidden, guests, bots, rows = raw
    return Snapshot(
        visible=int(visible),
        hidden=int(hidden),
        guests=int(guests),
        bots=int(bots),
        listed=[
            ListedUser(pk=_text(pk), seen=float(seen), name=_text(name), url=_text(url))
            for pk, seen, name, url in rows
        ],
    )


def user_presence(
    client: redis.Redis, config: Config, pk: str
) -> tuple[float | None, float | None]:
    """Return (score in the online sets, last seen from the HASH) for one user."""
    pipe = client.pipeline(transaction=False)
    pipe.zscore(key(config, "users"), pk)
    pipe.zscore(key(config, "hidden"), pk)
    pipe.hget(user_key(config, pk), "seen")
    visible, hidden, seen = pipe.execute()
    score = visible if visible is not None else hidden
    return score, (float(seen) if seen is not None else None)


def count_stale(client: redis.Redis, config: Config, *, now: float) -> dict[str, int]:
    cutoff = "(" + _score(now - config.window)
    pipe = client.pipeline(transaction=False)
    for kind in KINDS:
        pipe.zcount(key(config, kind), "-inf", cutoff)
    return dict(zip(KINDS, map(int, pipe.execute()), strict=True))


def prune_chunk(client: redis.Redis, config: Config, kind: str, *, now: float) -> list[str]:
    """Remove up to ``PRUNE_CHUNK_SIZE`` members of ``kind`` last seen before the window."""
    removed = _script(client, _PRUNE_CHUNK)(
        keys=[key(config, kind)], args=[_score(now - config.window), PRUNE_CHUNK_SIZE]
    )
    return [_text(member) for member in removed]


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def reset() -> None:
    _script.cache_clear()
