--[[
  Records one visit, in one round trip to the visitor's shard.

  The visitor joins the set of their kind (a user also leaves the other user set and refreshes
  their display HASH), leaves the sets of the identity they had until now when it is in this shard
  (the guest's or bot's member on login, the user's pk on logout), moves to the room of the visit
  (or out of the one they were in), and joins the shard's HyperLogLog of the day.

  With one shard the same call keeps the site-wide numbers (with several, a shard cannot count the
  whole site, and the cleanup command does it): buffered page hits ride along, and the visit raises
  the all-time peak and samples the online counts into their counters when ``sampling`` says so:
  '1' always (the process's first visit of the second), '?' only if the visitor was not online
  until now (not in the set, or stale there and not pruned yet: one ZSCORE tells). The counts rise
  only when someone comes online, so the peak and the largest count of every slice follow every
  rise at once, while a visitor online already, the common case, runs no count at all; the
  per-second samples keep the counters following the counts down.

  Input (only the keys the call may touch are declared, in this order):
    KEYS[1]   the sorted set the visitor joins (its name ends with their kind)
    then      the day's visitors HyperLogLog, when ``visitor`` names one
    then      for a user: the other user set, and the user's display HASH
    then      the former identity's two sets, when ``former`` names one
    then      the shard's HASH of who is in which room, and its sorted set of rooms
    then      with one shard: the users, hidden, guests and bots sets, the peak HASH and the set
              of known counters
    The counter HASHes are named in Lua from ``counter_prefix``, and the key that remembers the
    page-hit batches added from the arguments after ``second``: they share the base tag. A room's
    sets are named from ``room_prefix``: they share the shard's tag.

    ARGV[1]   member: who joins the set
    ARGV[2]   score: when (the set's score)
    ARGV[3]   visitor: what the day's HyperLogLog receives ('' for nothing)
    ARGV[4]   visitors_expire_at: when that HyperLogLog expires (Unix seconds)
    ARGV[5]   seen_ttl: for a user, how long the display HASH lives ('' for a guest or bot)
    ARGV[6]   name: the user's display name ('' for a guest or bot)
    ARGV[7]   url: the user's profile URL ('' for none)
    ARGV[8]   former: the identity the visitor had until now, which leaves its two sets ('' for
              none)
    ARGV[9]   place: the visitor's field in the HASH of who is in which room
    ARGV[10]  former_places: the fields of the former identity (comma-separated), which leave
              their rooms too
    ARGV[11]  room: the room of the visit ('' for none)
    ARGV[12]  room_prefix: how the keys of a room's sets begin
    ARGV[13]  mode: how the visit places the visitor: 'go' into ``room`` (out of the one they
              were in when it is ''), a page view; 'keep' wherever they are (``room`` is ''),
              any other request; 'stay' into ``room`` unless they are in another, a page's own
              word that its reader is still on it
    ARGV[14]  sampling: '1', '?' or '0' (see above); with '0', the arguments after it are not sent
    ARGV[15]  online_since: the score from which someone counts as online
    ARGV[16]  counter_prefix: how the keys of the counter HASHes begin
    ARGV[17]  precisions: the counters' precisions, comma-separated
    ARGV[18]  may_stop: one '1' or '0' per precision (see includes/sampling)
    ARGV[19]  second: the Unix second sampled
    ARGV[20…] the page-hit batch and its increments (see includes/counters, ``add_batch``)

  Output:
    1 if the visitor was not online until now (their next page should not be shown a kept
    snapshot read before this visit), else 0.
]]

--- @include "includes/counters"
--- @include "includes/sampling"
--- @include "includes/rooms"

-- The arguments by name, in the order of ``store.visits.RECORD_ARGUMENTS``.
local member = ARGV[1]
local score = ARGV[2]
local visitor = ARGV[3]
local visitors_expire_at = ARGV[4]
local seen_ttl = ARGV[5]
local name = ARGV[6]
local url = ARGV[7]
local former = ARGV[8]
local place = ARGV[9]
local former_places = ARGV[10]
local room = ARGV[11]
local room_prefix = ARGV[12]
local mode = ARGV[13]
local sampling = ARGV[14]
local online_since = ARGV[15]
local counter_prefix = ARGV[16]
local precisions = ARGV[17]
local may_stop = ARGV[18]
local second = ARGV[19]
-- The page-hit batch's arguments follow the named ones.
local batch = 20

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
-- set of their kind. A page view in another room (or in none) takes them out of the one they were
-- in.
local where, index = take(), take()
for field in string.gmatch(former_places, '[^,]+') do
  leave_room(where, room_prefix, field, former)
end
local was = redis.call('HGET', where, place)
if mode == 'keep' or (mode == 'stay' and was and was ~= room) then
  -- Not a page view, or a page's word that its reader is still on it while a later page put
  -- them in another room: they stay in the room they are in, and are seen there now.
  room = was or ''
end
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
if added == 1 or (before and tonumber(before) < tonumber(online_since)) then
  return 1
end
return 0
