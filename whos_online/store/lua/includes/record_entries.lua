--[[
  The record script's entries recorded one by one: the visits that are not plain
  (includes/record_plain), logouts and former people leaving, a page's reader leaving its room, a
  connection entering or leaving it. Read ahead (a command per set for the whole batch), then run
  in order, each seeing what those before it wrote (includes/held).

  Part of lua/record.lua, included in a block that runs only for a call that has such entries, so
  that a call of plain visits alone makes none of these functions; it uses the script's locals
  (``sets``, ``where``, ``place``, ``arrived``…) and includes/record_rooms.
]]

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

-- Reads ahead, a command per set: the online scores and places of everyone these entries name,
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
  add_visitor(entry.hll, entry.visitor, entry.day_end)
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
