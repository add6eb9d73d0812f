--[[
  Records a batch of visits in one shard, in one call: what a process queued since its last
  flush, its people's visits and the moves that go with them, in the order they happened.

  Each visit puts its person in the set of their kind, scored by when they were seen (a user
  also leaves the other user set and refreshes their display HASH), takes the identity they had
  until now off the online sets when it is in this shard (the guest's or bot's member on login,
  the user's pk on logout), places them in a room as its mode says, and adds them to the day's
  HyperLogLog of visitors. A visit older than what the sets hold for its person (a batch sent
  again after an outage, or one that another process's newer batch beat to Redis) only adds to
  the HyperLogLog: the newer visit's time and room stand. Its former identity still leaves,
  unless that identity was seen after the visit too (a colleague behind the same address).
  A user's visit from before their logout or erasure (``gone_prefix``) is not recorded
  at all: it cannot bring back someone who left, or a name that was erased. What the visits add
  to a HyperLogLog, and to the index of rooms (each room's latest visit), is written once per
  call, after them: a command per batch rather than per visit. So are the reads and the
  online-set writes of the visits of people the call names once (as an entry's member or former
  identity): their scores, gone marks and rooms are read first, set-at-a-time (ZMSCORE, MGET,
  HMGET), and their new scores written in one ZADD per set after the loop; nothing in between
  reads what those write. People named more than once are read and written at their turn.

  Other entries of the batch: 'l', an identity leaving this shard's sets and rooms (the former
  identity of a visit recorded in another shard, or a user logging out), unless it was seen
  after; 'r', a page's reader leaving its room, kept in it ``leave_grace`` seconds more if the
  room is still theirs and they were not seen in it after they left (a reload); 'e', a connection
  of the person entering a room or renewing its stay there, which is a visit that keeps them
  where they are too; 'x', a connection leaving its room.

  A person's connections are kept in a sorted set of theirs, ``…links:<person>`` (member: the
  room, the byte LINK and the connection; score: its last renewal), which expires a little after
  the window of its last renewal, so that connections that die silently vanish with it. A person
  is in a room while a connection of theirs there was renewed within the window, besides their
  page room: a page view elsewhere, or a page's leaving word, keeps them in a room a live
  connection holds, and a connection leaving takes them out of its room only when it was their
  last there and the room is not their page room.

  The shard's epoch key holds a random word: it is set (to the candidate given) when missing, so
  that a Redis that lost its data, by a restart without persistence or a FLUSHDB, gets a new one;
  processes compare it with the word their visitors' throttle cookies carry.

  With one shard the same call keeps the site-wide numbers: it samples the online counts into the
  peak and the ``online:*`` counters when ``sampling`` says so ('1' always, '?' only when someone
  in the batch was not online until now), and adds the process's page hits riding along. On the
  shard whose slot holds the site-wide keys it also registers the layout (``SHARDS``) its writer
  uses, so that an erasure finds every layout that ever held data.

  Input:
    KEYS[1..4]  the users, hidden, guests and bots sorted sets
    KEYS[5]     the shard's HASH of who is in which room (``…rooms:where``; the HASH of the
                rooms' titles beside it, ``…rooms:titles``, is named from it in Lua)
    KEYS[6]     the shard's sorted set of rooms, by their latest visit
    KEYS[7]     the shard's epoch
    KEYS[8]     the peak HASH, on the shard whose slot holds the site-wide keys (shard 0, the
                only one with SHARDS 1); on the others, KEYS[8…] are the HyperLogLogs below
    KEYS[9]     the set of known counters (likewise)
    KEYS[10]    the set of layouts seen (likewise)
    KEYS[11…]   the day's visitors HyperLogLogs the batch adds to (an entry names its own by
                index). A user's display HASH and a room's sets are named in Lua from
                ``user_prefix`` and ``room_prefix``: they share the shard's hash tag.

    ARGV[1]   now: the time of the flush (the peak's time)
    ARGV[2]   online_since: the score from which someone counts as online
    ARGV[3]   seen_ttl: how long a user's display HASH lives
    ARGV[4]   user_prefix: how the keys of the users' display HASHes begin
    ARGV[5]   room_prefix: how the keys of a room's sets begin
    ARGV[6]   sampling: '1', '?' or '0' (see above)
    ARGV[7]   counter_prefix: how the keys of the counter HASHes begin
    ARGV[8]   precisions: the counters' precisions, comma-separated
    ARGV[9]   may_stop: one '1' or '0' per precision (see includes/sampling)
    ARGV[10]  second: the Unix second sampled
    ARGV[11]  epoch: the word to set when the shard has none
    ARGV[12]  layout: on the base shard, the shard count to register in the set of layouts,
              with the one-shard layout ('0' for none); '' on the others
    ARGV[13]  visitors_ttl: seconds a day's HyperLogLog lives after its day ends
    ARGV[14]  window: WINDOW, how long a visit counts (and a logout's mark lives)
    ARGV[15]  leave_grace: seconds a reader who left a page still counts in its room
    ARGV[16]  gone_prefix: how the keys that mark when a user logged out or was erased begin
    ARGV[17]  count: how many entries follow, of 14 arguments each:
                op         'v' a visit, 'l' an identity leaving, 'r' a reader leaving a room,
                           'e' a connection entering (or renewing), 'x' a connection leaving
                kind       'users', 'hidden', 'guests' or 'bots' ('l': the kind of the sets
                           left, 'users' for both user sets, 'guests' for both anonymous ones)
                member     who
                score      when ('l': when they left; 'r': when the reader left the page)
                visitor    what the day's HyperLogLog receives ('' for nothing)
                hll        the index in KEYS of that HyperLogLog ('0' for none)
                day_end    when that HyperLogLog's day ends (Unix seconds)
                name, url  a user's display name and profile URL ('' otherwise)
                former     the identity the visitor had until now, in this shard ('' for none)
                room       the room ('' for none)
                mode       how a visit places its person: 'go' into ``room`` (out of theirs
                           when it is ''), a page view; 'keep' wherever they are (in no room
                           if they left theirs), any other request; 'stay' into ``room``
                           unless they are in another, or left it and no longer count there,
                           a page's word that its reader is still on it
                title      the room's title for people, set as the visitor enters it ('' for
                           none)
                connection  the connection of an 'e' or 'x' entry ('' for the others); its
                            room is ``room``, and an 'e' entry's mode is 'keep'
    ARGV[…]   on the base shard, the page-hit batch and its increments (see includes/counters,
              ``add_batch``), after the entries

  Output:
    {epoch, arrived, layouts, changes}
    epoch      the shard's epoch
    arrived    one character per entry: '1' for a visitor who was not online until now, else '0'
    layouts    on the base shard, how many layouts are recorded (0 elsewhere)
    changes    the batch's room changes, a flat list of four values per change:
                 entry      the entry's number in the batch (from 1)
                 who        '' for the entry's member, or '<kind>:<member>' for another
                            identity whose room a step of the entry left (a visit's former
                            identity, an 'l' entry's), of the set that held it ('hidden' for a
                            user held by neither user set: never named by mistake)
                 left       the room they were in and no longer are ('' for none); a reader's
                            leave ('r') that took effect counts, though they still count there
                            for ``leave_grace`` seconds
                 entered    the room they are in and were not, or had left ('' for none)
]]

--- @include "includes/counters"
--- @include "includes/sampling"
--- @include "includes/rooms"

local rcall = redis.call
local now = ARGV[1]
-- (ARGV[1] and ARGV[2] are the latest visit's time and its window's edge, so that a batch of
-- visits made at given times, by the API, samples the counts as of then.)
local online_since = tonumber(ARGV[2])
local seen_ttl = ARGV[3]
local user_prefix = ARGV[4]
local room_prefix = ARGV[5]
local sampling = ARGV[6]
local window = tonumber(ARGV[14])
local leave_grace = tonumber(ARGV[15])
local gone_prefix = ARGV[16]
local count = tonumber(ARGV[17])
-- The entries' arguments, each as ``store.record.ENTRY_ARGUMENTS`` lists them.
local FIELDS = 14
local first = 18
local where, index = KEYS[5], KEYS[6]
-- The shard's HASH of rooms' titles, beside the HASH of who is where (``rooms:titles``), and
-- how the keys of the people's connections begin (``links:<person>``).
local titles = string.gsub(where, 'where$', 'titles')
local links_prefix = string.gsub(where, 'rooms:where$', 'links:')
-- Between a connection's room and its id in a member of ``links:<person>``: a valid UTF-8 room
-- name never holds it. The key outlives its last renewal's window by LINKS_OUTLIVE seconds.
local LINK = '\255'
local LINKS_OUTLIVE = 60
local sets = {users = KEYS[1], hidden = KEYS[2], guests = KEYS[3], bots = KEYS[4]}
local OTHER_USER_SET = {users = 'hidden', hidden = 'users'}
-- The sets of a person's kind that a room holds them in: a user's both user sets.
local ROOM_KINDS = {
  users = {'users', 'hidden'},
  hidden = {'users', 'hidden'},
  guests = {'guests'},
  bots = {'bots'},
}
-- The sets and the fields of who is where that a former identity leaves, by the visitor's kind.
local FORMER = {
  users = {{'guests', 'bots'}, {'guests:', 'bots:'}},
  hidden = {{'guests', 'bots'}, {'guests:', 'bots:'}},
  guests = {{'users', 'hidden'}, {'u:'}},
  bots = {{'users', 'hidden'}, {'u:'}},
}

local function place(kind, member)
  if kind == 'users' or kind == 'hidden' then
    return 'u:' .. member
  end
  return kind .. ':' .. member
end

-- The room changes of the batch (see Output), and the number of the entry being run.
local changes = {}
local entry_number = 0

local function changed(who, left, entered)
  local n = #changes
  changes[n + 1] = entry_number
  changes[n + 2] = who
  changes[n + 3] = left or ''
  changes[n + 4] = entered or ''
end

-- Takes ``member`` off the ``kinds`` sets and out of its room, as of ``score``: unless one of
-- those sets saw it after that (the same address's next visitor, a user's other device). A room
-- it leaves is a change of the entry's, by ``<kind>:<member>``.
local function leave_as_of(kinds, prefixes, member, score)
  for _, set in ipairs(kinds) do
    local seen = rcall('ZSCORE', sets[set], member)
    if seen and tonumber(seen) > tonumber(score) then
      return
    end
  end
  local held_by
  for _, set in ipairs(kinds) do
    if rcall('ZREM', sets[set], member) == 1 then
      held_by = held_by or set
    end
  end
  for _, prefix in ipairs(prefixes) do
    local room = leave_room(where, room_prefix, prefix .. member, member)
    if room then
      -- A user's field does not say which user set held them: a user in neither (pruned from
      -- the sets before the rooms) is told as hidden, never named by mistake.
      local kind = prefix == 'u:' and (held_by or 'hidden') or string.sub(prefix, 1, -2)
      changed(kind .. ':' .. member, room, '')
    end
  end
end

-- A user who left (logged out) at ``score``: their visits from before are not recorded for a
-- window, the time such a visit could still count.
local function mark_gone(pk, score)
  local key = gone_prefix .. pk
  local marked = rcall('GET', key)
  if not marked or tonumber(marked) < tonumber(score) then
    rcall('SET', key, score, 'EX', window)
  end
end

local function leave_identity(kind, member, score)
  local left = FORMER[kind == 'users' and 'guests' or 'users']
  leave_as_of(left[1], left[2], member, score)
  if kind == 'users' then
    mark_gone(member, score)
  end
end

-- What the batch adds to the day's HyperLogLogs (by index in KEYS), and to the index of rooms:
-- each written once, at the end, rather than a command per visit.
local visitors = {}
local visitors_day_end = {}
local rooms_latest = {}

local function add_visitor(visitor, hll, day_end)
  if visitor ~= '' and hll > 0 then
    local pending = visitors[hll]
    if not pending then
      pending = {}
      visitors[hll] = pending
      visitors_day_end[hll] = day_end
    end
    pending[#pending + 1] = visitor
  end
end

local function touch_room(room, score)
  local latest = rooms_latest[room]
  if not latest or tonumber(score) > tonumber(latest) then
    rooms_latest[room] = score
  end
end

-- Whether ``member`` still counts in ``room`` (in one of its sets of ``kinds``) at ``score``.
local function counted_in(room, kinds, member, score)
  for _, set_kind in ipairs(kinds) do
    local seen = rcall('ZSCORE', room_prefix .. room .. ':' .. set_kind, member)
    if seen and tonumber(seen) > tonumber(score) - window then
      return true
    end
  end
  return false
end

-- Marks that ``member`` left ``room`` at ``left``: they count there ``grace`` seconds more (their
-- score is set so that the window ends then, unless it is from after they left; -1 ends it at
-- once), and stay a member of its sets until the cleanup takes them, and the mark, away. When a
-- connection of theirs ``holds`` the room, they count there as long as it does.
local function mark_left(room, kinds, member, left, grace, holds)
  left = tonumber(left)
  local edge = left - window + grace
  for _, set_kind in ipairs(kinds) do
    local set = room_prefix .. room .. ':' .. set_kind
    local seen = rcall('ZSCORE', set, member)
    if not holds and seen and tonumber(seen) > edge and tonumber(seen) <= left then
      rcall('ZADD', set, 'XX', edge, member)
    end
  end
  rcall('HSET', where, place(kinds[1], member), LEFT .. room)
end

-- The rooms where the person of ``field`` holds a connection renewed within the window of
-- ``score``, as a set: empty for whoever holds none (one read of a key that does not exist).
local function linked_rooms(field, score)
  local held = {}
  local floor = '(' .. (tonumber(score) - window)
  for _, link in ipairs(rcall('ZRANGEBYSCORE', links_prefix .. field, floor, '+inf')) do
    held[string.match(link, '^[^\255]*')] = true
  end
  return held
end

-- Whether the shard's hidden set exists: without it, a user's visit skips looking there.
local hidden_exists = rcall('EXISTS', KEYS[2]) == 1

-- What the visits read, read set-at-a-time before them: one ZMSCORE per online set, one MGET of
-- the users' gone marks and one HMGET of who is where, rather than a command per visit each.
-- Only for a person named by one entry of the call (as its member or its former identity): the
-- entries before theirs then wrote nothing of what these read, so the values read first are
-- those a command at their turn would read. Anyone named twice reads at their turn, as before.
local named = {}
for n = 0, count - 1 do
  local i = first + FIELDS * n
  local member, former = ARGV[i + 2], ARGV[i + 9]
  named[member] = (named[member] or 0) + 1
  if former ~= '' then
    named[former] = (named[former] or 0) + 2
  end
end
local ahead = {} -- by entry index: true when its visit reads what was read first
local deferred = {users = {}, hidden = {}, guests = {}, bots = {}} -- their ZADDs, by set
local scores = {users = {}, hidden = {}, guests = {}, bots = {}}
local gone_marks, places = {}, {}
do
  local by_set = {users = {}, guests = {}, bots = {}}
  local gone_keys, gone_of, fields, field_of = {}, {}, {}, {}
  for n = 0, count - 1 do
    local i = first + FIELDS * n
    local member = ARGV[i + 2]
    if ARGV[i] == 'v' and named[member] == 1 then
      local kind = ARGV[i + 1]
      ahead[i] = true
      if OTHER_USER_SET[kind] then
        local list = by_set.users
        list[#list + 1] = member
        gone_keys[#gone_keys + 1] = gone_prefix .. member
        gone_of[#gone_keys] = member
        fields[#fields + 1] = 'u:' .. member
      else
        local list = by_set[kind]
        list[#list + 1] = member
        fields[#fields + 1] = kind .. ':' .. member
      end
      field_of[#fields] = fields[#fields]
    end
  end
  local function read_scores(set_kind, members)
    if #members > 0 then
      local found = rcall('ZMSCORE', sets[set_kind], unpack(members))
      local into = scores[set_kind]
      for k, member in ipairs(members) do
        into[member] = found[k]
      end
    end
  end
  read_scores('users', by_set.users)
  if hidden_exists then
    read_scores('hidden', by_set.users)
  end
  read_scores('guests', by_set.guests)
  read_scores('bots', by_set.bots)
  if #gone_keys > 0 then
    local found = rcall('MGET', unpack(gone_keys))
    for k, member in ipairs(gone_of) do
      gone_marks[member] = found[k]
    end
  end
  if #fields > 0 then
    local found = rcall('HMGET', where, unpack(fields))
    for k, field in ipairs(field_of) do
      places[field] = found[k]
    end
  end
end

-- Returns 1 if the visitor was not online until now, and 'gone' besides when it was not recorded
-- for being older than the user's logout or erasure.
local function visit(i)
  local kind, member, score, mode = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 11]
  local set = sets[kind]
  local other = OTHER_USER_SET[kind]
  local read_first = ahead[i]
  local when = tonumber(score)
  if other then
    local gone
    if read_first then
      gone = gone_marks[member]
    else
      gone = rcall('GET', gone_prefix .. member)
    end
    if gone and tonumber(gone) > when then
      return 0, 'gone' -- from before they logged out, or were erased
    end
  end
  add_visitor(ARGV[i + 4], tonumber(ARGV[i + 5]), ARGV[i + 6])
  local former = ARGV[i + 9]
  if former ~= '' then
    local left = FORMER[kind]
    leave_as_of(left[1], left[2], former, score)
    if not other then
      mark_gone(former, score) -- a logout
    end
  end
  local before, in_other
  if read_first then
    -- (Read before the hidden set could be made by this call: nobody else's visit puts them
    -- there.)
    before = scores[kind][member]
    if other then
      in_other = scores[other][member]
    end
  else
    before = rcall('ZSCORE', set, member)
    if other and (other ~= 'hidden' or hidden_exists) then
      in_other = rcall('ZSCORE', sets[other], member)
    end
  end
  local own = before
  -- A user is in one of the two user sets at most; a visit older than either's score is stale.
  if in_other and (not before or tonumber(in_other) > tonumber(before)) then
    before = in_other
  end
  if before and tonumber(before) > when then
    return 0 -- a newer visit of theirs is recorded already
  end
  local added
  if read_first then
    -- Written with the others of its set after the loop, in one ZADD: nothing before then reads
    -- this person's score (they are named once), and the counts are sampled after it.
    local pending = deferred[kind]
    pending[#pending + 1] = score
    pending[#pending + 1] = member
    added = own and 0 or 1
  else
    added = rcall('ZADD', set, score, member)
  end
  if kind == 'hidden' then
    hidden_exists = true
  end
  if other then
    if in_other then
      rcall('ZREM', sets[other], member) -- they were hidden, or were not, until now
    end
    local hash = user_prefix .. member
    rcall('HSET', hash, 'name', ARGV[i + 7], 'url', ARGV[i + 8], 'seen', score)
    rcall('EXPIRE', hash, seen_ttl)
  end
  -- Rooms: the shard's HASH says which room each person is in (or which they left); their
  -- member sits in that room's set of their kind. A page view in another room (or in none)
  -- takes them out of theirs; only a page view puts back someone who left (see includes/rooms).
  local field = place(kind, member)
  local room = ARGV[i + 10]
  local was, left
  if read_first then
    was, left = room_in(places[field])
  else
    was, left = room_in(rcall('HGET', where, field))
  end
  local kinds = ROOM_KINDS[kind]
  if mode == 'keep' then
    room = left and '' or (was or '')
  elseif mode == 'stay' and left then
    -- Back only into the room they left, while they still count there: the page's word after a
    -- reload, whose leaving word came first. Otherwise only a page view puts them back.
    if was ~= room or not counted_in(was, kinds, member, score) then
      room = ''
    end
  elseif mode == 'stay' and was and was ~= room then
    room = was -- a later page of theirs (another tab) put them in another room
  end
  -- A room one of their connections holds they neither leave nor enter by a page view: looked
  -- up only when the visit would take them out of a room or into one.
  local moves = (was and not left and was ~= room) or (room ~= '' and (was ~= room or left))
  local held = moves and linked_rooms(field, score) or {}
  local leaves = was and not left and was ~= room and not held[was]
  local enters = room ~= '' and (was ~= room or left) and not held[room]
  if leaves or enters then
    changed('', leaves and was or '', enters and room or '')
  end
  if was and (was ~= room or left) then
    if room ~= '' then
      -- Out of the room they were in (or left). A user may still be in its set of the other
      -- kind, out of date: a cleanup that pruned the shard's sets has not pruned the rooms yet.
      if not held[was] then
        for _, set_kind in ipairs(kinds) do
          rcall('ZREM', room_prefix .. was .. ':' .. set_kind, member)
        end
      end
    elseif not left then
      -- A page view in no room: out at once, with the mark that they left, so that a page of
      -- the room still open in another tab does not put them back.
      mark_left(was, kinds, member, score, -1, held[was])
    end
  end
  if room ~= '' then
    if was ~= room or left then
      rcall('HSET', where, field, room)
      if ARGV[i + 12] ~= '' then
        rcall('HSET', titles, room, ARGV[i + 12])
      end
    end
    rcall('ZADD', room_prefix .. room .. ':' .. kind, score, member)
    if other then
      rcall('ZREM', room_prefix .. room .. ':' .. other, member)
    end
    touch_room(room, score)
  end
  if added == 1 or tonumber(before) < online_since then
    return 1
  end
  return 0
end

local function leave_room_by(i)
  local kind, member, left, room = ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3]), ARGV[i + 10]
  local field = place(kind, member)
  local was, gone = room_in(rcall('HGET', where, field))
  if was ~= room or gone then
    return
  end
  -- Counted in the room until ``leave_grace`` after they left: their score there is set so that
  -- the window ends then. A score from after they left (the reload, recorded first) stands, and
  -- so does a connection of theirs that holds the room.
  local held = linked_rooms(field, left)[room]
  mark_left(room, ROOM_KINDS[kind], member, left, leave_grace, held)
  if not held then
    changed('', room, '')
  end
end

-- Whether the person of ``field`` counts in ``room`` as a reader of its page: it is their page
-- room, and they did not leave it.
local function page_room_of(field, room)
  local was, left = room_in(rcall('HGET', where, field))
  return was == room and not left, was == room and left
end

-- 'e': the visit keeps them online where they are; then the connection holds them in its room
-- (in its set of their kind, at the later of this renewal and their score there).
local function enter(i)
  local new, gone = visit(i)
  if gone then
    return new
  end
  local kind, member, score, room = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 10]
  local field = place(kind, member)
  local links = links_prefix .. field
  local _, left_page = page_room_of(field, room)
  local set = room_prefix .. room .. ':' .. kind
  local seen = rcall('ZSCORE', set, member)
  local since = tonumber(score) - window
  local counted = not left_page and seen and tonumber(seen) > since
  rcall('ZREMRANGEBYSCORE', links, '-inf', since)
  rcall('ZADD', links, score, room .. LINK .. ARGV[i + 13])
  rcall('EXPIRE', links, math.ceil(window) + LINKS_OUTLIVE)
  if not seen or tonumber(seen) < tonumber(score) then
    rcall('ZADD', set, score, member)
  end
  local other = OTHER_USER_SET[kind]
  if other then
    -- In the room as the other kind of user until now (they were hidden, or were not).
    local as_other = rcall('ZSCORE', room_prefix .. room .. ':' .. other, member)
    if as_other then
      counted = counted or (not left_page and tonumber(as_other) > since)
      rcall('ZREM', room_prefix .. room .. ':' .. other, member)
    end
  end
  touch_room(room, score)
  if not counted then
    changed('', '', room)
  end
  return new
end

-- 'x': the connection leaves its room; their last live one there takes them out of it, unless it
-- is their page room.
local function leave_link(i)
  local kind, member, score, room = ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 10]
  local field = place(kind, member)
  local links = links_prefix .. field
  if rcall('ZREM', links, room .. LINK .. ARGV[i + 13]) == 0 then
    return -- never entered, or it and its key died long ago
  end
  if linked_rooms(field, score)[room] then
    return
  end
  local page, left_page = page_room_of(field, room)
  if page then
    return
  end
  local kinds = ROOM_KINDS[kind]
  local counted = not left_page and counted_in(room, kinds, member, score)
  local held_by
  for _, set_kind in ipairs(kinds) do
    if rcall('ZREM', room_prefix .. room .. ':' .. set_kind, member) == 1 then
      held_by = held_by or set_kind
    end
  end
  if left_page then
    rcall('HDEL', where, field)
  end
  if counted then
    -- Told as the kind of the set that held them: a leave names a user 'users' whether hidden
    -- or not, and a hidden one must not be told as shown.
    changed((held_by or kind) .. ':' .. member, room, '')
  end
end

local arrived = {}
local arrivals = 0
for n = 0, count - 1 do
  local i = first + FIELDS * n
  local op = ARGV[i]
  local new = 0
  entry_number = n + 1
  if op == 'v' then
    new = visit(i)
  elseif op == 'l' then
    leave_identity(ARGV[i + 1], ARGV[i + 2], ARGV[i + 3])
  elseif op == 'r' then
    leave_room_by(i)
  elseif op == 'e' then
    new = enter(i)
  else
    leave_link(i)
  end
  arrived[n + 1] = new
  arrivals = arrivals + new
end

for kind, pending in pairs(deferred) do
  if #pending > 0 then
    rcall('ZADD', sets[kind], unpack(pending))
  end
end

-- At most MAX_ENTRIES_PER_CALL of each, well within what unpack takes.
for hll, added in pairs(visitors) do
  local key = KEYS[hll]
  if rcall('PFADD', key, unpack(added)) == 1 then
    rcall('EXPIREAT', key, tonumber(visitors_day_end[hll]) + tonumber(ARGV[13]))
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
  epoch = ARGV[11]
  rcall('SET', KEYS[7], epoch)
end

local layouts = 0
if ARGV[12] ~= '' then
  if ARGV[12] ~= '0' then
    -- Every site starts in the one-shard layout: a site that never left it keeps no record.
    rcall('SADD', KEYS[10], '1', ARGV[12])
  end
  layouts = rcall('SCARD', KEYS[10])
end

-- The counts are sampled, and a batch of hits added, only when there is something to do.
local samples = sampling == '1' or (sampling == '?' and arrivals > 0)
local batch = first + FIELDS * count
local has_hits = #ARGV > batch + 2 and (ARGV[batch] ~= '' or tonumber(ARGV[batch + 3]) > 0)
if samples or has_hits then
  local peak, known = KEYS[8], KEYS[9]
  local precision_list = parse_precisions(ARGV[8])
  if samples then
    local users = rcall('ZCOUNT', KEYS[1], online_since, '+inf')
      + rcall('ZCOUNT', KEYS[2], online_since, '+inf')
    local guests = rcall('ZCOUNT', KEYS[3], online_since, '+inf')
    local bots = rcall('ZCOUNT', KEYS[4], online_since, '+inf')
    raise_peak(peak, users + guests, now)
    sample_all(known, ARGV[7], precision_list, ARGV[9], tonumber(ARGV[10]), users, guests, bots)
  end
  if has_hits then
    add_batch(ARGV[7], known, precision_list, batch)
  end
end

arrived = table.concat(arrived)
return {epoch, arrived, layouts, changes}
