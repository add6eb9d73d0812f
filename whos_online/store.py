"""The Redis keys and commands of presence: who is online, the peak and the daily visitors.

Keys are made by ``keyspace``: the people online under the hash tag of their shard, the site-wide
keys under the base tag; the counters have their own module.

Writes that belong together go out in one round trip: a Lua script where the work must be atomic
or reads what it writes, a pipeline otherwise. Nothing here is O(number of people online) except
``prune_chunk``, which is bounded by its chunk size, and ``snapshot(limit=None)``, which the API
documents as a full listing.

Functions take the client explicitly: the request path passes its short-timeout client and lets
the caller fail open; the cleanup command passes a patient one and lets errors surface.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

from django.dispatch import receiver
from redis.exceptions import NoScriptError

from whos_online import counters, identity, keyspace
from whos_online.conf import config_changed
from whos_online.connection import execute, is_cluster
from whos_online.results import Snapshot

if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping, Sequence
    from datetime import date

    from whos_online.conf import Config
    from whos_online.connection import Client

#: Per shard: the HASH of who is in which room, the sorted set of rooms by their latest visit,
#: and how the keys of a room's sets begin (``room:<name>:<kind>``).
ROOMS_WHERE: Final = "rooms:where"
ROOMS_INDEX: Final = "rooms"
ROOM_PREFIX: Final = "room:"

#: The sorted sets of people and bots, by kind. ``hidden`` holds users who are counted, not named.
KINDS: Final = ("users", "hidden", "guests", "bots")

# Lua shared by the scripts that sample the online counts: ``raise_peak`` keeps the most people
# ever online, ``sample`` keeps the largest count seen in each slice of an ``online:*`` counter.
#
# Sampling walks the precisions from the finest up and stops at the first slice that already
# holds at least the count, when every coarser precision is a multiple of that one (a '1' in the
# may-stop flags): its slices then contain this one, and the write that filled it filled them
# too. Most calls thus read one field per counter instead of writing every precision.
_LUA_SAMPLING: Final = (
    counters.LUA_ADD_INCREMENTS
    + """
local function raise_peak(peak, people, now)
  if people > tonumber(redis.call('HGET', peak, 'count') or '0') then
    redis.call('HSET', peak, 'count', people, 'at', now)
  end
end

local function sample(known, prefix, precisions, may_stop, second, name, value)
  for i, precision in ipairs(precisions) do
    local counter = precision .. ':' .. name
    local slice = second - second % precision
    local current = redis.call('HGET', prefix .. counter, slice)
    if current and tonumber(current) >= value then
      if string.sub(may_stop, i, i) == '1' then
        return
      end
    elseif redis.call('HSET', prefix .. counter, slice, value) == 1 then
      redis.call('ZADD', known, 0, counter)
    end
  end
end

local function sample_all(known, prefix, precisions, may_stop, second, users, guests, bots)
  sample(known, prefix, precisions, may_stop, second, 'online:users', users)
  sample(known, prefix, precisions, may_stop, second, 'online:guests', guests)
  sample(known, prefix, precisions, may_stop, second, 'online:bots', bots)
end
"""
)

# Takes ``member`` out of the room that the HASH ``where`` gives for ``field`` ("u:<pk>" for a
# user, "<kind>:<member>" for a guest or bot), from the sets of its kind (a user from both user
# sets), and forgets the field. The room's sets are named from ``room_prefix`` in Lua: they share
# the shard's hash tag, so they live in the slot of the declared keys.
_LUA_ROOMS: Final = """
local function leave_room(where, room_prefix, field, member)
  local room = redis.call('HGET', where, field)
  if not room then
    return
  end
  local kind = string.match(field, '^[^:]+')
  local sets = kind == 'u' and {'users', 'hidden'} or {kind}
  for _, set in ipairs(sets) do
    redis.call('ZREM', room_prefix .. room .. ':' .. set, member)
  end
  redis.call('HDEL', where, field)
end
"""

# The record script's arguments, in ARGV order. ``record_calls`` fills them by name and the script
# reads them as Lua locals of the same names, so that neither side counts positions:
# - member, score: who joins the kind's set, and when (the set's score);
# - visitor, visitors_expire_at: what the day's HyperLogLog receives ('' for nothing), and when
#   that HyperLogLog expires;
# - seen_ttl, name, url: for a user, how long the display HASH lives, and what it holds ('' for a
#   guest or bot);
# - former: the identity the visitor had until now, which leaves its two sets ('' for none);
# - place, former_places: the visitor's field in the shard's HASH of who is in which room, and
#   the fields (comma-separated) of the former identity, which leave their rooms too;
# - room, room_prefix: the room the visit is in ('' for none) and how its sets' keys begin;
# - sampling: whether the visit samples the online counts (see below); with '0', the arguments
#   after it are not sent;
# - online_since: the score from which someone counts as online; counter_prefix, precisions,
#   may_stop, second: what sampling the counters needs.
# The page-hit batch and its increments follow them (see counters.add_batch).
RECORD_ARGUMENTS: Final = (
    "member",
    "score",
    "visitor",
    "visitors_expire_at",
    "seen_ttl",
    "name",
    "url",
    "former",
    "place",
    "former_places",
    "room",
    "room_prefix",
    "sampling",
    "online_since",
    "counter_prefix",
    "precisions",
    "may_stop",
    "second",
)


def _lua_locals(names: Sequence[str]) -> str:
    return "".join(f"local {name} = ARGV[{index}]\n" for index, name in enumerate(names, 1))


# One recorded visit, in one round trip to the visitor's shard: join the kind's set (for a user,
# also leave the other user set and refresh the display HASH), leave the sets of the identity the
# visitor had until now when they are in this shard (the guest's or bot's member on login, the
# user's pk on logout), and add the visitor to the shard's HyperLogLog of the day.
#
# With one shard the same call keeps the site-wide numbers (with several, a shard cannot count
# the whole site, and the cleanup command does it): buffered page hits ride along, and the visit
# raises the all-time peak and samples the online counts into their counters when ``sampling``
# says so: '1' always (this process's first visit of the second), '?' only if the visitor was not
# online until now (not in the set, or stale there and not pruned yet: one ZSCORE tells). The
# counts rise only when someone comes online, so the peak and the largest count of every slice
# follow every rise at once, while a visitor online already, the common case, runs no count at
# all; the per-second samples keep the counters following the counts down.
#
# Only keys the call may touch are declared, in this order: the set joined; the day's visitors
# (when ``visitor`` names one); for a user, the other user set and the HASH; the former identity's
# two sets (when ``former`` names one); with one shard, the four sets, the peak and the known
# counters. The counter HASHes are named in Lua from ``counter_prefix``, and the key that
# remembers the page-hit batches added from the arguments after ``second``: they share the base
# tag.
_RECORD: Final = (
    _LUA_SAMPLING
    + _LUA_ROOMS
    + _lua_locals(RECORD_ARGUMENTS)
    # The page-hit batch's arguments follow the named ones (see ``add_batch``).
    + f"local batch = {len(RECORD_ARGUMENTS) + 1}\n"
    + """
local n = 1
local function take()
  n = n + 1
  return KEYS[n]
end
local before = sampling == '?' and redis.call('ZSCORE', KEYS[1], member)
local added = redis.call('ZADD', KEYS[1], score, member)
if visitor ~= '' then
  local visitors = take()
  if redis.call('PFADD', visitors, visitor) == 1 then
    redis.call('EXPIREAT', visitors, visitors_expire_at)
  end
end
if seen_ttl ~= '' then
  -- A user is in one user set at most: only one who just joined this one can be in the other.
  local other = take()
  if added == 1 then
    redis.call('ZREM', other, member)
  end
  local hash = take()
  redis.call('HSET', hash, 'name', name, 'url', url, 'seen', score)
  redis.call('EXPIRE', hash, seen_ttl)
end
if former ~= '' then
  redis.call('ZREM', take(), former)
  redis.call('ZREM', take(), former)
end
-- Rooms: the shard's HASH says which room each person is in; their member sits in that room's
-- set of their kind. A visit in another room (or in none) takes them out of the one they were in.
local where, index = take(), take()
for field in string.gmatch(former_places, '[^,]+') do
  leave_room(where, room_prefix, field, former)
end
local was = redis.call('HGET', where, place)
if was and was ~= room then
  leave_room(where, room_prefix, place, member)
end
if room ~= '' then
  if was ~= room then
    redis.call('HSET', where, place, room)
  end
  local kind = string.match(KEYS[1], '[^:]+$')
  redis.call('ZADD', room_prefix .. room .. ':' .. kind, score, member)
  if seen_ttl ~= '' then
    -- A user who was hidden, or was not, leaves the room's other user set.
    local other = kind == 'users' and 'hidden' or 'users'
    redis.call('ZREM', room_prefix .. room .. ':' .. other, member)
  end
  redis.call('ZADD', index, score, room)
end
-- The counts are sampled, and a batch of hits added, only when there is something to do: on
-- most visits (someone online already, no hits riding along) this part runs no command.
local samples = sampling == '1' or (sampling == '?'
  and (added == 1 or tonumber(before) < tonumber(online_since)))
local has_hits = sampling ~= '0' and (ARGV[batch] ~= '' or tonumber(ARGV[batch + 3]) > 0)
if samples or has_hits then
  local users, hidden, guests, bots, peak, known = take(), take(), take(), take(), take(), take()
  local precision_list = parse_precisions(precisions)
  if samples then
    local online_users = redis.call('ZCOUNT', users, online_since, '+inf')
      + redis.call('ZCOUNT', hidden, online_since, '+inf')
    local online_guests = redis.call('ZCOUNT', guests, online_since, '+inf')
    local online_bots = redis.call('ZCOUNT', bots, online_since, '+inf')
    raise_peak(peak, online_users + online_guests, score)
    sample_all(known, counter_prefix, precision_list, may_stop, tonumber(second),
      online_users, online_guests, online_bots)
  end
  if has_hits then
    add_batch(counter_prefix, known, precision_list, batch)
  end
end
-- Whether the visitor was not online until now: their next page should not be shown a kept
-- snapshot read before this visit (see ``snapshots``).
if added == 1 or (before and tonumber(before) < tonumber(online_since)) then
  return 1
end
return 0
"""
)

# Takes a person off two sets (KEYS[1..2]) and out of the rooms their fields (ARGV[3]) name in the
# HASH of who is where (KEYS[3]), and deletes KEYS[4] when given: a former identity in a shard of
# its own (a login or logout whose two identities fall in different shards), a logout, an erasure.
_LEAVE: Final = (
    _LUA_ROOMS
    + """
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
for field in string.gmatch(ARGV[3], '[^,]+') do
  leave_room(KEYS[3], ARGV[2], field, ARGV[1])
end
if #KEYS >= 4 then
  redis.call('DEL', KEYS[4])
end
return 1
"""
)

# The site-wide counts, as the cleanup command reads them from every shard, into the peak and the
# online counters. KEYS: the peak, the known counters; ARGV: the time, the counter prefix,
# precisions, may-stop flags, the second, and the users, guests and bots online.
_SAMPLE: Final = (
    _LUA_SAMPLING
    + """
local users, guests, bots = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
raise_peak(KEYS[1], users + guests, ARGV[1])
sample_all(KEYS[2], ARGV[2], parse_precisions(ARGV[3]), ARGV[4], tonumber(ARGV[5]),
  users, guests, bots)
return 1
"""
)

# One shard's counts of every kind, its newest LIMIT visible users with their display data, and
# its visitors of the day, in one round trip; shard 0 also reads the peak (KEYS[6]), which shares
# its slot. The per-user HASHes are not in KEYS because their names are only known once the range
# is read; they share the shard's hash tag, so they live in the same slot.
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
if #KEYS >= 6 then
  result[6] = redis.call('HMGET', KEYS[6], 'count', 'at')
else
  result[6] = {}
end
if #KEYS >= 5 then
  result[7] = redis.call('PFCOUNT', KEYS[5])
else
  result[7] = 0
end
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

# Prunes one room in one shard, a chunk at a time: takes up to ARGV[2] members last seen before
# ARGV[1] out of the room's four sets (KEYS[1..4]), and out of the HASH of who is where (KEYS[5])
# when it still names this room (ARGV[3]) for them. A room left with no member leaves the index
# of rooms (KEYS[6]), so that the cleanup stops visiting it and no key of it is left.
# Returns {members removed, 1 if the room is gone}.
_PRUNE_ROOM: Final = """
local cutoff, chunk, room = '(' .. ARGV[1], tonumber(ARGV[2]), ARGV[3]
local kinds = {'users', 'hidden', 'guests', 'bots'}
local removed = 0
for i = 1, 4 do
  if removed >= chunk then
    return {removed, 0}
  end
  local stale = redis.call('ZRANGEBYSCORE', KEYS[i], '-inf', cutoff, 'LIMIT', 0, chunk - removed)
  if #stale > 0 then
    redis.call('ZREM', KEYS[i], unpack(stale))
    local prefix = i <= 2 and 'u:' or kinds[i] .. ':'
    for _, member in ipairs(stale) do
      if redis.call('HGET', KEYS[5], prefix .. member) == room then
        redis.call('HDEL', KEYS[5], prefix .. member)
      end
    end
    removed = removed + #stale
  end
end
if removed < chunk and redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[4]) == 0 then
  redis.call('ZREM', KEYS[6], room)
  return {removed, 1}
end
return {removed, 0}
"""

#: Rooms of one shard read from its index per step of the cleanup.
ROOMS_PAGE_SIZE: Final = 500

#: Members removed per prune call: about a millisecond of Redis time each.
PRUNE_CHUNK_SIZE: Final = 1000


def key(config: Config, suffix: str) -> str:
    """A site-wide key (under the base tag)."""
    return keyspace.key(config, suffix)


def user_key(shard: keyspace.Shard, pk: str) -> str:
    return shard.key(f"user:{pk}")


def visitors_key(shard: keyspace.Shard, day: date | str) -> str:
    text = day if isinstance(day, str) else day.isoformat()
    return shard.key(f"visitors:{text}")


@functools.lru_cache(maxsize=64)
def _day_visitors_key(shard: keyspace.Shard, day_number: int) -> str:
    return visitors_key(shard, identity.utc_day(day_number * 86400))


def _score(now: float) -> str:
    return f"{now:.3f}"


def user_shard(config: Config, pk: str) -> keyspace.Shard:
    return keyspace.shard_of(config, keyspace.user_identity(pk))


def member_shard(config: Config, kind: str, member: str) -> keyspace.Shard:
    """The shard of a member of ``kind``'s set: users by their pk, guests and bots by member."""
    if kind in {"users", "hidden"}:
        return user_shard(config, member)
    return keyspace.shard_of(config, member)


@dataclass(frozen=True)
class UserDetails:
    """What a user's display HASH holds, and whether they are counted but not named."""

    pk: str
    hidden: bool
    name: str
    url: str


@dataclass(frozen=True)
class ScriptCall:
    """One script to run on one shard: what ``run`` sends, in one pipeline or one by one."""

    source: str
    keys: list[str]
    args: list[str | int | float]


def run(client: Client, calls: Sequence[ScriptCall]) -> list[Any]:
    """Run ``calls`` and return their replies, in one round trip where the client allows.

    On one Redis (plain or Sentinel-managed) several calls go out in one pipeline of EVALSHAs;
    scripts the server does not know yet are loaded and the pipeline is sent once more. A cluster
    client runs each call on its own (redis-py refuses EVALSHA in cluster pipelines), following
    MOVED and ASK replies, so a call costs one round trip to the node of its shard.
    """
    if len(calls) == 1 or is_cluster(client):
        return [_run_one(client, call) for call in calls]
    scripts = [keyspace.script(client, call.source) for call in calls]
    for attempt in range(2):
        pipe = client.pipeline(transaction=False)
        for script, call in zip(scripts, calls, strict=True):
            pipe.evalsha(script.sha, len(call.keys), *call.keys, *call.args)
        replies = pipe.execute(raise_on_error=False)
        missing = [
            script
            for script, reply in zip(scripts, replies, strict=True)
            if isinstance(reply, NoScriptError)
        ]
        if not missing or attempt:
            break
        for script in {script.sha: script for script in missing}.values():
            client.script_load(script.script)
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return list(replies)


def _run_one(client: Client, call: ScriptCall) -> Any:
    """EVALSHA, or EVAL (which also loads the script) if the server lacks it.

    Not redis-py's ``Script``: its call costs about 9 µs more than the EVALSHA itself, which is
    on every recorded visit. And not its reload on a cluster, which sends SCRIPT LOAD to every
    primary, so that a master that is down would make every node that has not run the script yet
    fail too. Sent by ``connection.execute``, which spares one Redis redis-py's per-call work.
    """
    numkeys = len(call.keys)
    try:
        return execute(client, "EVALSHA", sha1_of(call.source), numkeys, *call.keys, *call.args)
    except NoScriptError:
        return execute(client, "EVAL", call.source, numkeys, *call.keys, *call.args)


@functools.cache
def sha1_of(source: str) -> str:
    """A script's SHA1, as EVALSHA names it (worked out once per script and process)."""
    return hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()


#: The sorted set each kind of visit joins, by its position in ``KINDS``.
KIND_INDEX: Final = {kind: index for index, kind in enumerate(KINDS, start=1)}
#: The sets a former identity leaves: a user's pk leaves both user sets, a guest's (or bot's)
#: member both anonymous sets.
_FORMER_SETS: Final = {
    "users": ("guests", "bots"),
    "hidden": ("guests", "bots"),
    "guests": ("users", "hidden"),
    "bots": ("users", "hidden"),
}


@dataclass(frozen=True)
class _ShardLayout:
    """The keys and arguments that every visit of one kind to one shard sends alike."""

    joined: str
    #: For a user, the user set they are not in ("hidden" for one who is not hidden).
    other_user_set: str
    rooms: tuple[str, str]
    room_prefix: str
    #: What the visitor's field in the HASH of who is in which room begins with (see ``place``).
    place_prefix: str
    #: With one shard, the keys that sampling the counts reads and writes.
    counts: tuple[str, ...]


@dataclass(frozen=True)
class _Recording:
    """What every recorded visit under one Config sends alike, and, per shard and kind, the keys
    and arguments its visits share: worked out once and kept, rather than made again on every
    recorded request."""

    peak: str
    known: str
    counter_prefix: str
    precisions: str
    may_stop: str
    last_seen: int
    #: Whether a visit samples the online counts itself: only when one shard holds everybody.
    samples: bool
    _layouts: dict[tuple[int, str], _ShardLayout] = field(default_factory=dict, compare=False)

    def layout(self, shard: keyspace.Shard, kind: str) -> _ShardLayout:
        found = self._layouts.get((shard.index, kind))
        if found is None:
            found = self._layouts[shard.index, kind] = _ShardLayout(
                joined=shard.key(kind),
                other_user_set=shard.key("hidden" if kind == "users" else "users"),
                rooms=(shard.key(ROOMS_WHERE), shard.key(ROOMS_INDEX)),
                room_prefix=shard.key(ROOM_PREFIX),
                place_prefix=place(kind, ""),
                counts=(*(shard.key(name) for name in KINDS), self.peak, self.known)
                if self.samples
                else (),
            )
        return found


def _recording(config: Config) -> _Recording:
    precisions = config.counter_precisions
    return _Recording(
        peak=peak_key(config),
        known=counters.known_key(config),
        counter_prefix=counters.counter_prefix(config),
        precisions=counters.precisions_arg(precisions),
        may_stop="".join("1" if flag else "0" for flag in _may_stop(precisions)),
        last_seen=config.last_seen_days * 86400,
        samples=config.shards == 1,
    )


_recording_of: Final = keyspace.PerConfig(_recording)


@dataclass(frozen=True)
class Visit:
    """One visit to record.

    ``kind`` is the set the visitor joins ("users", "guests" or "bots"; a user also gives
    ``user``, whose ``hidden`` moves them to "hidden"). ``former`` is who the visitor was until
    this visit, taken off the online sets in the same step: the guest's (or bot's) member when a
    user logs in, the user's pk when they log out ("" for none). ``visitor`` is what the day's
    unique-visitor HyperLogLog receives ("" adds nothing).
    """

    kind: str
    member: str
    now: float
    user: UserDetails | None = None
    former: str = ""
    visitor: str = ""
    #: The room the visit is in ("" for none: the visitor leaves the room they were in).
    room: str = ""


def place(kind: str, member: str) -> str:
    """A person's field in the HASH of who is in which room: users by pk, whether hidden or not."""
    return f"u:{member}" if kind in {"users", "hidden"} else f"{kind}:{member}"


def _former_places(kind: str, former: str) -> str:
    """The fields of the identity a visitor leaves: a guest's or bot's, or a user's."""
    return ",".join(dict.fromkeys(place(name, former) for name in _FORMER_SETS[kind]))


def record_calls(
    config: Config,
    visit: Visit,
    *,
    hits: Mapping[tuple[str, int], int] | None = None,
    batch: tuple[str, int] | None = None,
) -> list[ScriptCall]:
    """The calls that record ``visit``: one, to the visitor's shard, unless the visitor's former
    identity lives in another shard.

    ``hits`` ride along only when the visit samples (one shard), as the ``batch`` (process token,
    number) they were taken as (see ``hits``); the caller keeps them otherwise.
    """
    user, member, now = visit.user, visit.member, visit.now
    kind = visit.kind if user is None else ("hidden" if user.hidden else "users")
    fixed = _recording_of(config)
    shard = member_shard(config, kind, member)
    layout = fixed.layout(shard, kind)
    day_number = int(now // 86400)
    keys = [layout.joined]
    if visit.visitor:
        keys.append(_day_visitors_key(shard, day_number))
    if user is not None:
        keys += (layout.other_user_set, user_key(shard, member))
    former = former_places = ""
    calls = []
    if visit.former:
        former_sets = _FORMER_SETS[kind]
        former_shard = member_shard(config, former_sets[0], visit.former)
        former_keys = [former_shard.key(name) for name in former_sets]
        places = _former_places(kind, visit.former)
        if former_shard == shard:
            keys += former_keys
            former, former_places = visit.former, places
        else:
            calls.append(
                ScriptCall(
                    _LEAVE,
                    [*former_keys, former_shard.key(ROOMS_WHERE)],
                    [visit.former, former_shard.key(ROOM_PREFIX), places],
                )
            )
    keys += layout.rooms
    arguments: dict[str, str | int | float] = {
        "member": member,
        "score": _score(now),
        "visitor": visit.visitor,
        # The day's HyperLogLog lives LAST_SEEN_DAYS after the day ends.
        "visitors_expire_at": (day_number + 1) * 86400 + fixed.last_seen,
        "seen_ttl": "" if user is None else fixed.last_seen,
        "name": "" if user is None else user.name,
        "url": "" if user is None else user.url,
        "former": former,
        "place": layout.place_prefix + member,
        "former_places": former_places,
        "room": visit.room,
        "room_prefix": layout.room_prefix,
        "sampling": "0",
    }
    extra: list[str | int | float] = []
    if fixed.samples:
        keys += layout.counts
        arguments.update(
            sampling=_sampling.flag(int(now)),
            online_since=_score(now - config.window),
            counter_prefix=fixed.counter_prefix,
            precisions=fixed.precisions,
            may_stop=fixed.may_stop,
            second=int(now),
        )
        extra = [*counters.batch_args(config, batch), *counters.increment_args(hits or {})]
    # Those after ``sampling`` are left out when it is '0'; a name missing before them fails here.
    args = [arguments[name] for name in RECORD_ARGUMENTS[: len(arguments)]]
    return [ScriptCall(_RECORD, keys, args + extra), *calls]


def record(client: Client, config: Config, visit: Visit) -> Any:
    """Record one visit (see ``record_calls``); returns 1 if the visitor was not online until
    now, else 0."""
    return run(client, record_calls(config, visit))[0]


class _SamplingSeconds:
    """Which second this process last sampled the counts in, so that its first visit of each
    second samples them whoever the visitor is ('1'), and the others only for someone new ('?').

    Two threads may both take the same second as their first: they sample twice, which is
    harmless (each slice keeps the largest count).
    """

    def __init__(self) -> None:
        self.last = -1

    def flag(self, second: int) -> str:
        if second == self.last:
            return "?"
        self.last = second
        return "1"


_sampling: Final = _SamplingSeconds()


@receiver(config_changed, dispatch_uid="whos_online.store.reset")
def reset(**kwargs: object) -> None:
    _sampling.last = -1


@functools.lru_cache(maxsize=8)
def _may_stop(precisions: tuple[int, ...]) -> tuple[bool, ...]:
    # A slice contains the current slice of every finer precision only if it is a multiple of it.
    return tuple(
        all(coarser % precision == 0 for coarser in precisions[index + 1 :])
        for index, precision in enumerate(precisions)
    )


def peak_key(config: Config) -> str:
    return key(config, "peak")


def remove_user(
    client: Client, config: Config, pk: str, *, erase: bool = False, shards: int | None = None
) -> None:
    """Take a user off the online list and out of their room, in one call; with ``erase``, also
    drop their last-seen record.

    ``shards`` names another layout than the configured one (the cleanup's old layouts).
    """
    shard = _shard_in(config, keyspace.user_identity(pk), shards)
    keys = [shard.key("users"), shard.key("hidden"), shard.key(ROOMS_WHERE)]
    if erase:
        keys.append(user_key(shard, pk))
    run(client, [ScriptCall(_LEAVE, keys, [pk, shard.key(ROOM_PREFIX), place("users", pk)])])


def _shard_in(config: Config, person: str, shards: int | None) -> keyspace.Shard:
    if shards is None or shards == config.shards:
        return keyspace.shard_of(config, person)
    layout = keyspace.layout(config, shards)
    return layout[keyspace.bucket(person, len(layout))]


def room_key(shard: keyspace.Shard, room: str, kind: str) -> str:
    return shard.key(f"{ROOM_PREFIX}{room}:{kind}")


def snapshot_call(
    config: Config, shard: keyspace.Shard, *, limit: int | None, now: float, room: str = ""
) -> ScriptCall:
    """One shard's part of a snapshot of the site, or of ``room`` (its four sets only: a room
    has no visitors of the day or peak of its own)."""
    if room:
        keys = [room_key(shard, room, kind) for kind in KINDS]
    else:
        keys = [shard.key(kind) for kind in KINDS] + [visitors_key(shard, identity.utc_day(now))]
        if shard.is_base:
            keys.append(peak_key(config))
    args: list[str | int | float] = [
        _score(now - config.window),
        -1 if limit is None else limit,
        shard.key("user:"),
    ]
    return ScriptCall(_SNAPSHOT, keys, args)


def parse_snapshot(raw: Sequence[Any], limit: int | None) -> Snapshot:
    visible, hidden, guests, bots, rows, peak_fields, visitors = raw
    peak, peak_at = peak_fields if peak_fields else (None, None)
    return Snapshot(
        visible=int(visible),
        hidden=int(hidden),
        guests=int(guests),
        bots=int(bots),
        rows=rows,
        peak_people=int(peak or 0),
        peak_at=float(peak_at) if peak_at is not None else None,
        visitors=int(visitors),
        limit=limit,
    )


def combine(parts: Sequence[Snapshot], limit: int | None) -> Snapshot:
    """One snapshot of the whole site from one per shard: counts and visitors add up (the shards
    hold different people), the names are the newest ``limit`` of all, the peak is shard 0's."""
    if len(parts) == 1:
        return parts[0]
    listed = sorted((row for part in parts for row in part.listed), key=lambda row: -row.seen)
    if limit is not None:
        listed = listed[:limit]
    peak = max(parts, key=lambda part: part.peak_people)
    return Snapshot(
        visible=sum(part.visible for part in parts),
        hidden=sum(part.hidden for part in parts),
        guests=sum(part.guests for part in parts),
        bots=sum(part.bots for part in parts),
        rows=[field for row in listed for field in (row.pk, repr(row.seen), row.name, row.url)],
        peak_people=peak.peak_people,
        peak_at=peak.peak_at,
        visitors=sum(part.visitors for part in parts),
        limit=limit,
    )


def snapshot(
    client: Client, config: Config, *, limit: int | None, now: float, room: str = ""
) -> Snapshot:
    """Counts, the newest ``limit`` visible users, the peak and the day's visitors of the whole
    site: one call per shard, in one round trip on one Redis (a second one, for the few shards
    that need it, when the first could not tell the newest names; see ``shard_limit``)."""
    shards = keyspace.layout(config)
    asked = shard_limit(limit, len(shards))
    calls = [snapshot_call(config, shard, limit=asked, now=now, room=room) for shard in shards]
    parts = [parse_snapshot(raw, asked) for raw in run(client, calls)]
    again = unfinished(parts, limit, asked)
    if again:
        more = [
            snapshot_call(config, shards[index], limit=limit, now=now, room=room) for index in again
        ]
        for index, raw in zip(again, run(client, more), strict=True):
            parts[index] = parse_snapshot(raw, limit)
    return combine(parts, limit)


def shard_limit(limit: int | None, shards: int) -> int | None:
    """How many names to ask each of ``shards`` shards for, to list the newest ``limit``.

    The newest people are spread over the shards by a hash, so each shard holds about
    limit / shards of them: asking each for twice that (and two more) gives every name needed
    nearly always, at a fraction of the cost of asking each for ``limit``. ``unfinished`` tells
    when it did not.
    """
    if limit is None or shards == 1:
        return limit
    return min(limit, 2 * -(-limit // shards) + 2)


def unfinished(parts: Sequence[Snapshot], limit: int | None, asked: int | None) -> list[int]:
    """The shards whose names beyond the ``asked`` they returned could be among the newest
    ``limit`` of all: those that returned all they were asked for, the last of them no older than
    the ``limit``-th newest name of all returned (or fewer than ``limit`` names came back)."""
    if limit is None or asked is None or asked >= limit:
        return []
    seen = sorted((row.seen for part in parts for row in part.listed), reverse=True)
    threshold = seen[limit - 1] if len(seen) >= limit else float("-inf")
    return [
        index
        for index, part in enumerate(parts)
        if part.listed and len(part.listed) >= asked and part.listed[-1].seen >= threshold
    ]


def user_presence(client: Client, config: Config, pk: str) -> tuple[float | None, float | None]:
    """Return (score in the online sets, last seen from the HASH) for one user."""
    return users_presence(client, config, [pk])[0]


def users_presence(
    client: Client, config: Config, pks: Sequence[str]
) -> list[tuple[float | None, float | None]]:
    """``user_presence`` of each of ``pks``, in one pipeline (one round trip on one Redis).

    The scores are read with one ZMSCORE (Redis 6.2) per online set and shard, however many of
    ``pks`` it holds, rather than two ZSCOREs per user; the last-seen times stay one HGET per
    user, since each lives in that user's own HASH.
    """
    if not pks:
        return []  # ZMSCORE with no member is an error, not an empty reply
    shards = [user_shard(config, pk) for pk in pks]
    by_shard: dict[keyspace.Shard, list[str]] = {}
    for pk, shard in zip(pks, shards, strict=True):
        by_shard.setdefault(shard, []).append(pk)
    pipe = client.pipeline(transaction=False)
    for shard, members in by_shard.items():
        pipe.zmscore(shard.key("users"), members)
        pipe.zmscore(shard.key("hidden"), members)
    for pk, shard in zip(pks, shards, strict=True):
        pipe.hget(user_key(shard, pk), "seen")
    replies = pipe.execute()
    scores: dict[str, float | None] = {}
    for index, members in enumerate(by_shard.values()):
        visible, hidden = replies[2 * index], replies[2 * index + 1]
        for pk, shown, unseen in zip(members, visible, hidden, strict=True):
            scores[pk] = shown if shown is not None else unseen
    seen_times = replies[2 * len(by_shard) :]
    return [
        (scores[pk], float(seen) if seen is not None else None)
        for pk, seen in zip(pks, seen_times, strict=True)
    ]


def online_user_pks(client: Client, config: Config, *, now: float, limit: int) -> list[str]:
    """The primary keys of up to ``limit`` users online (hidden ones included), newest first
    within each set: O(log N + limit) per set and shard, never the whole of a large set."""
    pipe = client.pipeline(transaction=False)
    for shard in keyspace.layout(config):
        for kind in ("users", "hidden"):
            pipe.zrevrangebyscore(shard.key(kind), "+inf", _score(now - config.window), 0, limit)
    pks = [keyspace.text(pk) for members in pipe.execute() for pk in members]
    return pks[:limit] if len(pks) > limit else pks


def oldest_seen(client: Client, config: Config) -> float | None:
    """When the longest-unseen member of any online set was last seen (None: the sets are
    empty): one ZRANGE of the first member per set and shard, O(log N) each. Members older than
    the window stay until the cleanup command removes them, so this tells whether it runs."""
    pipe = client.pipeline(transaction=False)
    for shard in keyspace.layout(config):
        for kind in KINDS:
            pipe.zrange(shard.key(kind), 0, 0, withscores=True)
    scores = [float(score) for first in pipe.execute() for _member, score in first]
    return min(scores, default=None)


def count_stale(
    client: Client, config: Config, *, now: float, shards: int | None = None
) -> dict[str, int]:
    cutoff = "(" + _score(now - config.window)
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
    removed = keyspace.script(client, _PRUNE_CHUNK)(
        keys=[shard.key(kind)], args=[_score(now - config.window), PRUNE_CHUNK_SIZE]
    )
    return [keyspace.text(member) for member in removed]


def sample(client: Client, config: Config, snapshot: Snapshot, *, now: float) -> None:
    """Raise the peak and sample the online counters from ``snapshot``, counted over every
    shard (the cleanup command does so when a visit cannot: with several shards)."""
    fixed = _recording_of(config)
    users = snapshot.visible + snapshot.hidden
    keyspace.script(client, _SAMPLE)(
        keys=[fixed.peak, fixed.known],
        args=[
            _score(now),
            fixed.counter_prefix,
            fixed.precisions,
            fixed.may_stop,
            int(now),
            users,
            snapshot.guests,
            snapshot.bots,
        ],
    )


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
    """Every layout that may hold data: the configured one and those the cleanup has seen."""
    seen = {int(each) for each in client.smembers(layouts_key(config))}
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
    client.srem(layouts_key(config), shards)


def read_peak(client: Client, config: Config) -> tuple[int, float | None]:
    count, at = client.hmget(peak_key(config), ["count", "at"])
    return int(count or 0), (float(at) if at is not None else None)


def reset_peak(client: Client, config: Config) -> None:
    client.delete(peak_key(config))


def unique_visitors(client: Client, config: Config, day: date) -> int:
    """The day's visitors: the shards' HyperLogLogs hold different people, so their estimates
    add up. One PFCOUNT per shard (redis-py keeps PFCOUNT out of cluster pipelines)."""
    return sum(int(client.pfcount(visitors_key(shard, day))) for shard in keyspace.layout(config))


def rooms_of(client: Client, shard: keyspace.Shard) -> Iterator[str]:
    """The rooms the index of ``shard`` names: those with someone in them, or left since the
    cleanup last ran. A page at a time (ZSCAN, which may name a room twice)."""
    for room, _score in client.zscan_iter(shard.key(ROOMS_INDEX), count=ROOMS_PAGE_SIZE):
        yield keyspace.text(room)


def prune_room_chunk(
    client: Client, config: Config, shard: keyspace.Shard, room: str, *, now: float
) -> tuple[int, bool]:
    """Take up to ``PRUNE_CHUNK_SIZE`` people gone for over the window out of ``room`` in
    ``shard``; returns how many, and whether the room is gone (emptied, and out of the index)."""
    keys = [room_key(shard, room, kind) for kind in KINDS]
    keys += [shard.key(ROOMS_WHERE), shard.key(ROOMS_INDEX)]
    removed, gone = keyspace.script(client, _PRUNE_ROOM)(
        keys=keys, args=[_score(now - config.window), PRUNE_CHUNK_SIZE, room]
    )
    return int(removed), bool(gone)
