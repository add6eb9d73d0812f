--[[
  Records a batch of one shard's entries in one call (docs/how-it-works.md, "The record script").

  Input:
    KEYS[1..4]  the users, hidden, guests and bots sorted sets
    KEYS[5]     the shard's HASH of who is in which room (``…rooms:where``)
    KEYS[6]     the shard's sorted set of rooms, by their latest visit
    KEYS[7]     the shard's epoch
    KEYS[8…]    on the base shard, the peak HASH, the set of known counters and the set of
                layouts, then the day's visitors HyperLogLogs; elsewhere those HyperLogLogs
    ARGV[1]     the names of the header's values, comma-separated (``record.HEADER_ARGUMENTS``)
    ARGV[2]     the names of an entry's values, comma-separated (``items.ENTRY_ARGUMENTS``)
    ARGV[3…]    the header's values, then ``count`` entries, then ``views`` and ``others``
                plain entries (includes/record_plain), then on the base shard the page hits
                (includes/counters, ``add_batch``)

  Output:
    {epoch, arrived, layouts, changes}: the shard's epoch; one '1' or '0' per entry, whether
    its person was not online until then; on the base shard how many layouts are recorded;
    the room changes, four values each: the entry's number, '' or '<kind>:<member>' for
    another person, the room left and the room entered ('' for none).
]]

--- @include "includes/rooms"
--- @include "includes/held"

local rcall, floor = redis.call, math.floor

-- The names of the header's values and of an entry's, in the order a call sends them: a call
-- that names others is refused rather than misread.
local HEADER = 'now,online_since,seen_ttl,user_prefix,room_prefix,sampling,counter_prefix,'
  .. 'precisions,may_stop,second,epoch,layout,visitors_ttl,window,leave_grace,gone_prefix,count,'
  .. 'views,others,plain_hll,plain_day_end'
local FIELDS = 'op,kind,member,score,visitor,hll,day_end,name,url,former,room,mode,title,connection'
if ARGV[1] ~= HEADER or ARGV[2] ~= FIELDS then
  return redis.error_reply('record.lua reads ' .. HEADER .. ' and ' .. FIELDS .. '; the call sent '
    .. tostring(ARGV[1]) .. ' and ' .. tostring(ARGV[2]))
end
local arg = {
  now = ARGV[3], online_since = ARGV[4], seen_ttl = ARGV[5], user_prefix = ARGV[6],
  room_prefix = ARGV[7], sampling = ARGV[8], counter_prefix = ARGV[9], precisions = ARGV[10],
  may_stop = ARGV[11], second = ARGV[12], epoch = ARGV[13], layout = ARGV[14],
  visitors_ttl = ARGV[15], window = ARGV[16], leave_grace = ARGV[17], gone_prefix = ARGV[18],
  count = ARGV[19], views = ARGV[20], others = ARGV[21], plain_hll = ARGV[22],
  plain_day_end = ARGV[23],
}
-- Where the entries begin, and how many values each has.
local first, width, count = 24, 14, tonumber(arg.count)

-- The entry being recorded: one table, its fields set again for each entry (``when`` is
-- its score as a number).
local entry, A = {}, ARGV

local online_since, window = tonumber(arg.online_since), tonumber(arg.window)
local room_prefix, user_prefix, gone_prefix = arg.room_prefix, arg.user_prefix, arg.gone_prefix
local where, index = KEYS[5], KEYS[6]
-- ``where`` ends in 'rooms:where'; the titles and the links share its beginning.
local titles = string.sub(where, 1, -6) .. 'titles'
local links_prefix = string.sub(where, 1, -12) .. 'links:'
local sets = {users = KEYS[1], hidden = KEYS[2], guests = KEYS[3], bots = KEYS[4]}
local OTHER_USER_SET = {users = 'hidden', hidden = 'users'}
-- The room sets that may hold a person of each kind: a user's both user sets.
local ROOM_KINDS = {users = {'users', 'hidden'}, hidden = {'users', 'hidden'}, guests = {'guests'},
  bots = {'bots'}}
local function place(kind, member)
  return OTHER_USER_SET[kind] and 'u:' .. member or kind .. ':' .. member
end

-- The room changes of the batch (see Output), and the number of the entry being run.
local changes, entry_number = {}, 0

local function changed(who, left, entered)
  local n = #changes
  changes[n + 1], changes[n + 2], changes[n + 3], changes[n + 4] = entry_number, who, left, entered
end

--- @include "includes/record_rooms"

-- What the batch adds to the day's HyperLogLogs and to the index of rooms, written at the end.
local visitors, visitors_day_end, rooms_latest, rooms_latest_when = {}, {}, {}, {}

-- Adds ``visitor`` ('' for none) to the day's HyperLogLog KEYS[hll] ('0' for none), whose day
-- ends at ``day_end``; a HyperLogLog is named only once someone is added to it (a PFADD of
-- nobody would make it).
local function add_visitor(hll, visitor, day_end)
  if hll ~= '0' and visitor ~= '' then
    local added = visitors[hll]
    if not added then
      added = {}
      visitors[hll], visitors_day_end[hll] = added, day_end
    end
    added[#added + 1] = visitor
  end
end

local function touch_room(room, score, when)
  local latest = rooms_latest_when[room]
  if not latest or when > latest then
    rooms_latest[room], rooms_latest_when[room] = score, when
  end
end

-- A user's display HASH; it expires LAST_SEEN_DAYS after the UTC day of their last visit, so
-- that only their first visit of a day sets it (or a visit that made it anew: it was evicted).
local function show_user(member, score, when, name, url, before)
  local hash, day = user_prefix .. member, floor(when / 86400)
  local made = rcall('HSET', hash, 'name', name, 'url', url, 'seen', score) == 3
  if made or not before or floor(before / 86400) ~= day then
    rcall('EXPIREAT', hash, (day + 1) * 86400 + tonumber(arg.seen_ttl))
  end
end

-- Whether each entry's person was not online until then, and how many were not.
local arrived, arrivals = {}, 0

-- The entries recorded one by one come first: their functions are made only for a call that
-- has some (most calls hold plain visits alone). The plain visits follow.
if count > 0 then
--- @include "includes/record_entries"
end
--- @include "includes/record_plain"
local batch, plain_arrivals = record_plain(first + width * count, tonumber(arg.views),
  tonumber(arg.others), arg.plain_hll)
arrivals = arrivals + plain_arrivals

for hll, added in pairs(visitors) do
  local key = KEYS[tonumber(hll)]
  if rcall('PFADD', key, unpack(added)) == 1 then
    rcall('EXPIREAT', key, tonumber(visitors_day_end[hll]) + tonumber(arg.visitors_ttl))
  end
end
if next(rooms_latest) then
  local scored = {}
  for room, score in pairs(rooms_latest) do
    scored[#scored + 1] = score
    scored[#scored + 1] = room
  end
  rcall('ZADD', index, 'GT', unpack(scored)) -- a later call of the flush may carry older visits
end

local epoch = rcall('GET', KEYS[7])
if not epoch then
  epoch = arg.epoch
  rcall('SET', KEYS[7], epoch)
end

local layouts = 0
if arg.layout ~= '' then
  if arg.layout ~= '0' then
    -- Every site starts in the one-shard layout: a site that never left it keeps no record.
    rcall('SADD', KEYS[10], '1', arg.layout)
  end
  layouts = rcall('SCARD', KEYS[10])
end

-- The counts are sampled ('1' always, '?' for someone new), and page hits added, when asked.
local samples = arg.sampling == '1' or (arg.sampling == '?' and arrivals > 0)
local has_hits = #ARGV > batch + 2 and (ARGV[batch] ~= '' or tonumber(ARGV[batch + 3]) > 0)
if samples or has_hits then
--- @include "includes/counters"
--- @include "includes/sampling"
  local precisions = parse_precisions(arg.precisions)
  if samples then
    local function online(kind)
      return rcall('ZCOUNT', sets[kind], online_since, '+inf')
    end
    local users, guests, bots = online('users') + online('hidden'), online('guests'), online('bots')
    raise_peak(KEYS[8], users + guests, arg.now)
    sample_all(KEYS[9], arg.counter_prefix, precisions, arg.may_stop, tonumber(arg.second),
      users, guests, bots)
  end
  if has_hits then
    add_batch(arg.counter_prefix, KEYS[9], precisions, batch)
  end
end

return {epoch, table.concat(arrived), layouts, changes}
