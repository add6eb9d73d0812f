"""The Redis keys and commands of presence: who is online, the peak and the daily visitors.

Keys are made by ``keyspace`` (one cluster hash tag for all); the counters have their own module.

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
from datetime import date, datetime, timezone
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from whos_online import counters, identity, keyspace

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

    import redis

    from whos_online.conf import Config

#: The sorted sets of people and bots, by kind. ``hidden`` holds users who are counted, not named.
KINDS: Final = ("users", "hidden", "guests", "bots")

# One recorded visit, in one round trip: join the kind's set (for a user, also leave the other
# user set and refresh the display HASH), leave the sets of the identity the visitor had until
# now (ARGV[8]: the guest's or bot's member on login, the user's pk on logout), add the visitor
# to the day's HyperLogLog, raise the all-time peak, and sample the online counts into their
# counters (each slice keeps the largest count seen in it). Buffered page hits ride along.
#
# Sampling walks the precisions from the finest up and stops at the first slice that already
# holds at least the count, when every coarser precision is a multiple of that one (a '1' in the
# may-stop flags): its slices then contain this one, and the write that filled it filled them
# too. Most requests thus read one field per counter instead of writing every precision.
#
# The arguments are few and mostly the same from one visit to the next: the slices are worked out
# here from the precisions and the second, since every argument costs packing, parsing and a Lua
# string on every recorded request.
_RECORD: Final = (
    counters.LUA_ADD_INCREMENTS
    + """
local kind = tonumber(ARGV[1])
local member = ARGV[2]
local now = ARGV[3]
redis.call('ZADD', KEYS[kind], now, member)
if kind <= 2 then
  redis.call('ZREM', KEYS[3 - kind], member)
  redis.call('HSET', KEYS[5], 'name', ARGV[6], 'url', ARGV[7], 'seen', now)
  redis.call('EXPIRE', KEYS[5], ARGV[5])
  if ARGV[8] ~= '' then
    redis.call('ZREM', KEYS[3], ARGV[8])
    redis.call('ZREM', KEYS[4], ARGV[8])
  end
elseif ARGV[8] ~= '' then
  redis.call('ZREM', KEYS[1], ARGV[8])
  redis.call('ZREM', KEYS[2], ARGV[8])
end
if ARGV[9] ~= '' and redis.call('PFADD', KEYS[7], ARGV[9]) == 1 then
  redis.call('EXPIREAT', KEYS[7], ARGV[10])
end
local min = ARGV[4]
local users = redis.call('ZCOUNT', KEYS[1], min, '+inf')
users = users + redis.call('ZCOUNT', KEYS[2], min, '+inf')
local guests = redis.call('ZCOUNT', KEYS[3], min, '+inf')
local bots = redis.call('ZCOUNT', KEYS[4], min, '+inf')
if users + guests > tonumber(redis.call('HGET', KEYS[6], 'count') or '0') then
  redis.call('HSET', KEYS[6], 'count', users + guests, 'at', now)
end
local prefix = ARGV[11]
local precisions = parse_precisions(ARGV[12])
local may_stop = ARGV[13]
local second = tonumber(ARGV[14])
local function sample(name, value)
  for i, precision in ipairs(precisions) do
    local counter = precision .. ':' .. name
    local slice = second - second % precision
    local current = redis.call('HGET', prefix .. counter, slice)
    if current and tonumber(current) >= value then
      if string.sub(may_stop, i, i) == '1' then
        return
      end
    elseif redis.call('HSET', prefix .. counter, slice, value) == 1 then
      redis.call('ZADD', KEYS[8], 0, counter)
    end
  end
end
sample('online:users', users)
sample('online:guests', guests)
sample('online:bots', bots)
add_increments(prefix, KEYS[8], precisions, 15)
return 1
"""
)

# Counts of every kind, the newest LIMIT visible users with their display data, the peak and the
# day's visitors, in one round trip. The per-user HASHes are not in KEYS because their names are
# only known once the range is read; they share the hash tag, so they live in the same slot.
_SNAPSHOT: Final = """
local min = ARGV[1]
local result = {}
for i = 1, 4 do
  result[i] = redis.call('ZCOUNT', KEYS[i], min, '+inf')
end
-- The listed users as one flat array (pk, score, name, url, pk, …): a table per user costs more.
local listed = {}
local limit = tonumber(ARGV[2])
if limit ~= 0 then
  local ids = redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', min, 'WITHSCORES', 'LIMIT', 0, limit)
  local n = 0
  for i = 1, #ids, 2 do
    local info = redis.call('HMGET', ARGV[3] .. ids[i], 'name', 'url')
    listed[n + 1] = ids[i]
    listed[n + 2] = ids[i + 1]
    listed[n + 3] = info[1] or ''
    listed[n + 4] = info[2] or ''
    n = n + 4
  end
end
result[5] = listed
result[6] = redis.call('HMGET', KEYS[5], 'count', 'at')
result[7] = redis.call('PFCOUNT', KEYS[6])
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


def key(config: Config, suffix: str) -> str:
    return keyspace.key(config, suffix)


def user_key(config: Config, pk: str) -> str:
    return key(config, f"user:{pk}")


def visitors_key(config: Config, day: date) -> str:
    return key(config, f"visitors:{day.isoformat()}")


def utc_day(now: float) -> date:
    return datetime.fromtimestamp(now, tz=timezone.utc).date()


def _score(now: float) -> str:
    return f"{now:.3f}"


class ListedUser(NamedTuple):
    """One listed user as the snapshot read it (a tuple: up to DISPLAY_LIMIT made per render)."""

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
    #: The listed users as the snapshot script returns them, (pk, score, name, url) flattened.
    rows: Sequence[bytes | str] = ()
    peak: int = 0
    #: When the peak was reached (Unix time), or None before anyone was recorded.
    peak_at: float | None = None
    #: Approximate distinct users and guests of the snapshot's UTC day.
    visitors: int = 0

    @functools.cached_property
    def listed(self) -> list[ListedUser]:
        """The newest visible users, read from ``rows`` on first use: a page that only counts
        (``{% online_count %}``) never pays for the up to DISPLAY_LIMIT of them."""
        text = keyspace.text
        fields = iter(self.rows)
        return [
            ListedUser(text(pk), float(seen), text(name), text(url))
            for pk, seen, name, url in zip(fields, fields, fields, fields, strict=True)
        ]


#: What readers show while Redis cannot be read: nobody online, no peak, no visitors.
EMPTY_SNAPSHOT: Final = Snapshot(visible=0, hidden=0, guests=0, bots=0)


@dataclass(frozen=True)
class UserDetails:
    """What a user's display HASH holds, and whether they are counted but not named."""

    pk: str
    hidden: bool
    name: str
    url: str


#: The sorted set each kind of visit joins, by its position in ``KINDS`` (Lua counts from 1).
KIND_INDEX: Final = {kind: index for index, kind in enumerate(KINDS, start=1)}


@dataclass(frozen=True)
class _Recording:
    """What every recorded visit under one Config sends alike."""

    kind_keys: tuple[str, ...]
    user_prefix: str
    peak: str
    visitors_prefix: str
    known: str
    counter_prefix: str
    precisions: str
    may_stop: str
    last_seen: int


def _recording(config: Config) -> _Recording:
    precisions = config.counter_precisions
    return _Recording(
        kind_keys=tuple(key(config, kind) for kind in KINDS),
        user_prefix=key(config, "user:"),
        peak=peak_key(config),
        visitors_prefix=key(config, "visitors:"),
        known=counters.known_key(config),
        counter_prefix=counters.counter_prefix(config),
        precisions=counters.precisions_arg(precisions),
        may_stop="".join("1" if flag else "0" for flag in _may_stop(precisions)),
        last_seen=config.last_seen_days * 86400,
    )


_recording_of: Final = keyspace.PerConfig(_recording)


def record(
    client: redis.Redis,
    config: Config,
    *,
    kind: str,
    member: str,
    now: float,
    user: UserDetails | None = None,
    former: str = "",
    visitor: str = "",
    hits: Mapping[tuple[str, int], int] | None = None,
) -> None:
    """Record one visit of ``kind`` ("users", "guests" or "bots"; a user passes ``user``).

    ``former`` is who the visitor was until this visit, taken off the online sets in the same
    step: the guest's (or bot's) member when a user logs in, the user's pk when they log out
    ("" for none).
    ``visitor`` is what the day's unique-visitor HyperLogLog receives ("" adds nothing).
    """
    if user is not None:
        kind = "hidden" if user.hidden else "users"
    fixed = _recording_of(config)
    day_number = int(now // 86400)
    keyspace.script(client, _RECORD)(
        keys=[
            *fixed.kind_keys,
            fixed.user_prefix + member if user is not None else fixed.user_prefix,
            fixed.peak,
            fixed.visitors_prefix + identity.utc_day(now),
            fixed.known,
        ],
        args=[
            KIND_INDEX[kind],
            member,
            _score(now),
            _score(now - config.window),
            fixed.last_seen,
            user.name if user else "",
            user.url if user else "",
            former,
            visitor,
            # The day's HyperLogLog lives LAST_SEEN_DAYS after the day ends.
            (day_number + 1) * 86400 + fixed.last_seen,
            fixed.counter_prefix,
            fixed.precisions,
            fixed.may_stop,
            int(now),
            *counters.increment_args(hits or {}),
        ],
    )


@functools.lru_cache(maxsize=8)
def _may_stop(precisions: tuple[int, ...]) -> tuple[bool, ...]:
    # A slice contains the current slice of every finer precision only if it is a multiple of it.
    return tuple(
        all(coarser % precision == 0 for coarser in precisions[index + 1 :])
        for index, precision in enumerate(precisions)
    )


def peak_key(config: Config) -> str:
    return key(config, "peak")


def remove_user(client: redis.Redis, config: Config, pk: str, *, erase: bool = False) -> None:
    """Take a user off the online list; with ``erase``, also drop their last-seen record."""
    pipe = client.pipeline(transaction=True)
    pipe.zrem(key(config, "users"), pk)
    pipe.zrem(key(config, "hidden"), pk)
    if erase:
        pipe.delete(user_key(config, pk))
    pipe.execute()


def snapshot(client: redis.Redis, config: Config, *, limit: int | None, now: float) -> Snapshot:
    raw: Sequence[Any] = keyspace.script(client, _SNAPSHOT)(
        keys=[
            *(key(config, kind) for kind in KINDS),
            peak_key(config),
            visitors_key(config, utc_day(now)),
        ],
        args=[
            _score(now - config.window),
            -1 if limit is None else limit,
            key(config, "user:"),
        ],
    )
    visible, hidden, guests, bots, rows, (peak, peak_at), visitors = raw
    return Snapshot(
        visible=int(visible),
        hidden=int(hidden),
        guests=int(guests),
        bots=int(bots),
        rows=rows,
        peak=int(peak or 0),
        peak_at=float(peak_at) if peak_at is not None else None,
        visitors=int(visitors),
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
    removed = keyspace.script(client, _PRUNE_CHUNK)(
        keys=[key(config, kind)], args=[_score(now - config.window), PRUNE_CHUNK_SIZE]
    )
    return [keyspace.text(member) for member in removed]


def read_peak(client: redis.Redis, config: Config) -> tuple[int, float | None]:
    count, at = client.hmget(peak_key(config), ["count", "at"])
    return int(count or 0), (float(at) if at is not None else None)


def reset_peak(client: redis.Redis, config: Config) -> None:
    client.delete(peak_key(config))


def unique_visitors(client: redis.Redis, config: Config, day: date) -> int:
    return int(client.pfcount(visitors_key(config, day)))
