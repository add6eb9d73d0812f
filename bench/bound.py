"""How near the record script's data could come to the floor: the same visits, their data
written as the record script writes it, by the leanest Lua this bench could write.

``bench batching`` runs these beside the floor and the record script. The lean script sends the
commands the record script sends for a visit of the batches' mix, in the record script's keys:
the online sets (a ZMSCORE per set, one ZADD per set), a user's display HASH, who is in which
room (one HMGET, one HSET), the room sets (a ZADD in the room and, for a user, the hidden set of
the room cleared; a ZREM in each set of the room left), the connections read on entering a room,
the users' gone marks (one MGET), the rooms' index, the day's visitors, the epoch and the
layouts. Like the record script, it writes nothing for a visit older than the one stored. It
takes seven arguments a visit and reads each into locals once, without the record script's
layers.

What it leaves out costs the record script Lua rather than commands, but for the counts the
script samples once a second: reads of what the same call wrote (a person twice in one call),
room modes other than a page view, a reader leaving a room (it refuses a call with such a visit
before it writes anything: the mix has none), a former identity, logouts, connections, titles
and the room changes it reports. Its visitors go to a HyperLogLog of its own rather than the
day's. It is a bound to measure against, not a script to record with: what stays between it and
the floor is what the data costs, and between the record script and it, mostly the record
script's Lua.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from bench import internals as whos
from bench import people as crowd

if TYPE_CHECKING:
    from collections.abc import Sequence

    from bench.harness import servers
    from bench.people import Pair

#: KEYS: the users, hidden, guests sets, who is where, the rooms' index, a HyperLogLog, the
#: epoch, the layouts. ARGV:
#: when the window began, the prefixes of the display HASHes, the rooms, the gone marks and the
#: connections, then
#: per visit its kind ('u' or 'g'), member, score, daily id, room, name and URL.
LEAN: Final = r"""
local since, users_at, rooms_at, gone_at = tonumber(ARGV[1]), ARGV[2], ARGV[3], ARGV[4]
local links_at, A, rcall, first, width = ARGV[5], ARGV, redis.call, 6, 7
local count = (#A - first + 1) / width
local users, guests, fields, visitors, gone = {}, {}, {}, {}, {}
for e = 1, count do
  local i = first + width * (e - 1)
  local member = A[i + 1]
  if A[i] == 'u' then
    users[#users + 1], gone[#gone + 1], fields[e] = member, gone_at .. member, 'u:' .. member
  else
    guests[#guests + 1], fields[e] = member, 'guests:' .. member
  end
  visitors[e] = A[i + 3]
end
local shown, hidden, anonymous = {}, {}, {}
if #users > 0 then
  shown, hidden = rcall('ZMSCORE', KEYS[1], unpack(users)), rcall('ZMSCORE', KEYS[2], unpack(users))
  rcall('MGET', unpack(gone))
end
if #guests > 0 then
  anonymous = rcall('ZMSCORE', KEYS[3], unpack(guests))
end
local where = rcall('HMGET', KEYS[4], unpack(fields))
for e = 1, count do
  local was = where[e]
  if was and (string.byte(was) == 255 or A[first + width * (e - 1) + 4] == '') then
    return redis.error_reply('the bound writes the batches mix, where nobody leaves a room')
  end
end
local user_scores, guest_scores, arrived, moved, index = {}, {}, {}, {}, {}
local u, g = 0, 0
for e = 1, count do
  local i = first + width * (e - 1)
  local member, score, room, was = A[i + 1], A[i + 2], A[i + 4], where[e]
  local before, scores, kinds
  if A[i] == 'u' then
    u = u + 1
    before, scores, kinds = shown[u] or hidden[u], user_scores, {'users', 'hidden'}
  else
    g = g + 1
    before, scores, kinds = anonymous[g], guest_scores, {'guests'}
  end
  before = before and tonumber(before)
  arrived[e] = (not before or before < since) and '1' or '0'
  if not before or before <= tonumber(score) then
    scores[#scores + 1], scores[#scores + 2] = score, member
    if A[i] == 'u' then
      rcall('HSET', users_at .. member, 'name', A[i + 5], 'url', A[i + 6], 'seen', score)
    end
    if room ~= '' then
      if was ~= room then
        rcall('ZRANGE', links_at .. fields[e], '0', '-1', 'WITHSCORES')
        if was then
          for k = 1, #kinds do
            rcall('ZREM', rooms_at .. was .. ':' .. kinds[k], member)
          end
        end
        moved[#moved + 1], moved[#moved + 2] = fields[e], room
      end
      rcall('ZADD', rooms_at .. room .. ':' .. kinds[1], score, member)
      if kinds[2] then
        rcall('ZREM', rooms_at .. room .. ':' .. kinds[2], member)
      end
      index[room] = score
    end
  end
end
if #user_scores > 0 then rcall('ZADD', KEYS[1], unpack(user_scores)) end
if #guest_scores > 0 then rcall('ZADD', KEYS[3], unpack(guest_scores)) end
if #moved > 0 then rcall('HSET', KEYS[4], unpack(moved)) end
local scored = {}
for room, score in pairs(index) do
  scored[#scored + 1], scored[#scored + 2] = score, room
end
if #scored > 0 then rcall('ZADD', KEYS[5], unpack(scored)) end
rcall('PFADD', KEYS[6], unpack(visitors))
rcall('GET', KEYS[7])
rcall('SCARD', KEYS[8])
return table.concat(arrived)
"""

#: The bound's phases, by label: whether they take the whole mix, or its visits in no room only
#: (as the record script's phase of those).
PHASES: Final = {
    "the same data by the leanest Lua, a bound: online sets, display HASHes and rooms": True,
    "the same data by the leanest Lua, a bound: visits in no room only": False,
}


def phase(
    node: servers.Node,
    config: whos.Config,
    who: Sequence[crowd.Person],
    *,
    at: int,
    turn: int,
) -> Pair:
    """The lean script's (Lua µs, CPU µs) per visit, writing ``who`` ``at`` a time; movers
    change room with ``turn``, as in the record script's phases."""
    client, shard = node.client, whos.keyspace.layout(config)[0]
    sha = client.script_load(LEAN)
    keys = [
        *(shard.key(kind) for kind in ("users", "hidden", "guests")),
        shard.key(whos.keyspace.ROOMS_WHERE),
        shard.key(whos.keyspace.ROOMS_INDEX),
        shard.key("visitors:bound"),
        whos.keyspace.epoch_key(shard),
        whos.keyspace.layouts_key(config),
    ]
    prefixes = [
        shard.key(name)
        for name in (
            "user:",
            whos.keyspace.ROOM_PREFIX,
            whos.keyspace.GONE_PREFIX,
            whos.keyspace.LINKS_PREFIX,
        )
    ]
    calls = crowd.calls_of(who, at)

    def send() -> int:
        for batch in calls:
            made = crowd.times(len(batch))
            args = [whos.keyspace.score(made[-1] - config.window), *prefixes]
            for person, when in zip(batch, made, strict=True):
                visit = crowd.visit_of(person, when, turn)
                user = visit.user
                args += [
                    "u" if user else "g",
                    person.member,
                    whos.keyspace.score(when),
                    visit.daily_id,
                    visit.room,
                    user.name if user else "",
                    user.url if user else "",
                ]
            client.evalsha(sha, len(keys), *keys, *args)
        return len(calls)

    return crowd.per(crowd.measure([node], send), len(calls) * at)
