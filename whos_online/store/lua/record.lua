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
    ARGV[2]     the names of an entry's values, comma-separated (``record.ENTRY_ARGUMENTS``)
    ARGV[3…]    the header's values, then ``count`` entries, then ``views`` and ``others``
                plain entries (includes/record_plain), then on the base shard the page hits
                (includes/counters, ``add_batch``)

  Output:
    {epoch, arrived, layouts, changes}: the shard's epoch; one '1' or '0' per entry, whether
    its person was not online until then; on the base shard how many layouts are recorded;
    the room changes, four values each: the entry's number, '' or '<kind>:<member>' for
    another person, the room left and the room entered ('' for none).
]]

--- @include "includes/counters"
--- @include "includes/sampling"
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

-- The entries recorded one by one (those that are not plain visits), in order.
-- The entry being read is ``entry``, its fields set again for each entry (``when`` is its
-- score as a number); ``places`` its field of ``where``, by number.
local places = {}
local function read_entry(n)
  local e, i = entry, first + width * (n - 1)
  local op, kind, member, score, visitor, hll, day_end, name, url, former, room, mode, title,
    connection = unpack(A, i, i + width - 1)
  e.op, e.kind, e.member, e.score, e.visitor, e.hll, e.day_end = op, kind, member, score, visitor,
    hll, day_end
  e.name, e.url, e.former, e.room, e.mode, e.title, e.connection = name, url, former, room, mode,
    title, connection
  e.when, e.place = tonumber(score), places[n]
  return e
end

-- The sets, and the fields of who is where, that a former person leaves, by the visitor's kind.
local LEFT_BY_USER = {{'guests', 'bots'}, {'guests:', 'bots:'}}
local LEFT_BY_GUEST = {{'users', 'hidden'}, {'u:'}}
local FORMER = {users = LEFT_BY_USER, hidden = LEFT_BY_USER, guests = LEFT_BY_GUEST,
  bots = LEFT_BY_GUEST}

-- Reads ahead, a command per set: the online scores and places of everyone the batch names,
-- and the users' gone marks.
local gone_marks = {}
do
  -- Both user sets are read for the same users, from one list.
  local users = {}
  local members = {users = users, hidden = users, guests = {}, bots = {}}
  local fields, pks, gone_keys = {}, {}, {}
  local function ahead(kinds, prefixes, member)
    local last
    for k = 1, #kinds do
      local listed = members[kinds[k]]
      if listed ~= last then
        listed[#listed + 1], last = member, listed
      end
    end
    for k = 1, #prefixes do
      fields[#fields + 1] = prefixes[k] .. member
    end
  end
  for n = 1, count do
    local i = first + width * (n - 1)
    local op, kind, member, former = A[i], A[i + 1], A[i + 2], A[i + 9]
    if op == 'l' then
      local left = FORMER[kind == 'users' and 'guests' or 'users']
      ahead(left[1], left[2], member)
    else
      local field = place(kind, member)
      places[n], fields[#fields + 1] = field, field
      if op == 'v' or op == 'e' then
        local listed = members[kind]
        listed[#listed + 1] = member
        if listed == users then
          pks[#pks + 1] = member
          gone_keys[#gone_keys + 1] = gone_prefix .. member
        end
      end
    end
    if former ~= '' then
      ahead(FORMER[kind][1], FORMER[kind][2], former)
    end
  end
  for kind, listed in pairs(members) do
    zread(sets[kind], listed)
  end
  hread(where, fields)
  if #pks > 0 then
    local found = rcall('MGET', unpack(gone_keys))
    for k = 1, #pks do
      gone_marks[pks[k]] = found[k]
    end
  end
end

--- @include "includes/record_leaving"
--- @include "includes/record_links"

local function add_visitor(entry)
  local hll = entry.hll
  if hll ~= '0' and entry.visitor ~= '' then
    local added = visitors[hll]
    if not added then
      added = {}
      visitors[hll], visitors_day_end[hll] = added, entry.day_end
    end
    added[#added + 1] = entry.visitor
  end
end

-- Returns 1 if the visitor was not online until now, and 'gone' besides when the visit is older
-- than the user's logout or erasure.
local function visit(entry)
  local kind, member, score = entry.kind, entry.member, entry.score
  local other, when = OTHER_USER_SET[kind], entry.when
  if other then
    local gone = gone_marks[member]
    if gone and tonumber(gone) > when then
      return 0, 'gone'
    end
  end
  add_visitor(entry)
  if entry.former ~= '' then
    leave_as_of(FORMER[kind][1], FORMER[kind][2], entry.former, score)
    if not other then
      mark_gone(entry.former, score) -- a logout
    end
  end
  local own = zscore(sets[kind], member)
  local as_other = other and zscore(sets[other], member)
  local before = own
  if as_other and (not own or as_other > own) then
    before = as_other
  end
  if before and before > when then
    return 0 -- a newer visit of theirs is recorded already
  end
  zadd(sets[kind], member, score, when)
  if other then
    if as_other then
      zrem(sets[other], member)
    end
    show_user(member, score, when, entry.name, entry.url, before)
  end
  local room = place_in_room(entry, ROOM_KINDS[kind])
  if room ~= '' then
    touch_room(room, score, when)
  end
  return (not own or before < online_since) and 1 or 0
end

for n = 1, count do
  local entry = read_entry(n)
  local op, new = entry.op, 0
  entry_number = n
  if op == 'v' then
    new = visit(entry)
  elseif op == 'l' then
    leave_identity(entry.kind, entry.member, entry.score)
  elseif op == 'r' then
    leave_page_room(entry)
  elseif op == 'e' then
    local gone
    new, gone = visit(entry)
    if not gone then
      enter_link(entry)
      touch_room(entry.room, entry.score, entry.when)
    end
  else
    leave_link(entry)
  end
  arrived[n] = new == 1 and '1' or '0' -- a string: joining numbers would format each
  arrivals = arrivals + new
end
write_held()

--- @include "includes/record_plain"
local batch, plain_arrivals = record_plain(first + width * count, tonumber(arg.views),
  tonumber(arg.others), arg.plain_hll, arg.plain_day_end)
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
  rcall('ZADD', index, unpack(scored))
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
