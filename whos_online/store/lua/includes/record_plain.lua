--[[
  The record script's plain visits: a page view ('go') or another request ('keep') of someone no
  other entry of the call names, with no former person. Most of a call is made of them, and the
  entries that are not (a login, a logout, a reader leaving, a connection, a page's "still
  here", a person twice) are recorded before them, entry by entry: they never meet the same
  person, so that the order of the two parts does not show.

  Each is read from the call as it was sent, without a table of fields: the online sets, the
  users' gone marks and who is where are read for all of them at once, and the online sets
  written at once (one ZADD, and one ZREM of users whose kind changed, per set: gathered here in
  arrays rather than through the held writes of includes/held, whose tables by key cost a
  visit 4 % more of Redis's instructions); their rooms go through ``place_in_room``, as any
  visit's.

  Part of lua/record.lua, included after includes/record_rooms, with whose locals and the
  script's (``sets``, ``OTHER_USER_SET``, ``ROOM_KINDS``, ``show_user``, ``add_visitor``,
  ``touch_room``…) it records.
]]

-- Reads the plain entries from ``A[start]`` on (``views`` page views first): where each
-- begins, its place in its kind's list of members (users share one), its field of ``where``,
-- and those lists; the index of the first value after them. An entry's values: kind, member,
-- score, visitor; a page view's room and title; a user's name and URL.
local function plain_entries(start, total, views)
  local at, slot, fields = {}, {}, {}
  local users, guests, bots, gone_keys = {}, {}, {}, {}
  local lists = {users = users, hidden = users, guests = guests, bots = bots}
  local i = start
  for n = 1, total do
    local kind, member = A[i], A[i + 1]
    local listed = lists[kind]
    local k = #listed + 1
    listed[k], slot[n], at[n] = member, k, i
    if listed == users then
      gone_keys[k], fields[n] = gone_prefix .. member, 'u:' .. member
      i = i + 6
    else
      fields[n] = kind .. ':' .. member
      i = i + 4
    end
    if n <= views then
      i = i + 2
    end
  end
  return at, slot, fields, {users, guests, bots, gone_keys}, i
end

-- The scores read for each kind's list, and the users' gone marks.
local function plain_reads(lists)
  local users, guests, bots, gone_keys = lists[1], lists[2], lists[3], lists[4]
  local read = {users = {}, hidden = {}, guests = {}, bots = {}, gone = {}}
  if #users > 0 then
    read.users, read.hidden = rcall('ZMSCORE', sets.users, unpack(users)),
      rcall('ZMSCORE', sets.hidden, unpack(users))
    read.gone = rcall('MGET', unpack(gone_keys))
  end
  if #guests > 0 then
    read.guests = rcall('ZMSCORE', sets.guests, unpack(guests))
  end
  if #bots > 0 then
    read.bots = rcall('ZMSCORE', sets.bots, unpack(bots))
  end
  return read
end

-- Puts the person of the plain entry at ``A[i]`` in their room, when they are in one or go
-- into one: through ``place_in_room``, with ``entry`` filled for it.
local function plain_place(i, kind, member, score, when, field, view)
  local room, title, mode = '', '', 'keep'
  if view then
    room, title, mode = A[i + 4], A[i + 5], 'go'
  end
  if room == '' and not held_fields[where][field] then
    return -- in no room, and into none
  end
  local e = entry
  e.kind, e.member, e.score, e.when, e.place = kind, member, score, when, field
  e.room, e.mode, e.title = room, mode, title
  local placed = place_in_room(e, ROOM_KINDS[kind])
  if placed ~= '' then
    touch_room(placed, score, when)
  end
end

-- Records the plain entry at ``A[i]`` (the ``k``th of its kind's list); returns '1' if its
-- person was not online until now, else '0'. ``adds`` and ``removed`` gather the online sets'
-- writes, by set.
local function plain_visit(i, k, field, view, read, adds, removed, hll)
  local kind, member, score, visitor = A[i], A[i + 1], A[i + 2], A[i + 3]
  local when, other = tonumber(score), OTHER_USER_SET[kind]
  local gone = other and read.gone[k]
  if gone and tonumber(gone) > when then
    return '0'
  end
  add_visitor(hll, visitor, arg.plain_day_end)
  local own, as_other = read[kind][k], other and read[other][k]
  own, as_other = own and tonumber(own), as_other and tonumber(as_other)
  local before = own
  if as_other and (not own or as_other > own) then
    before = as_other
  end
  if before and before > when then
    return '0' -- a newer visit of theirs is recorded already
  end
  local added = adds[kind]
  added[#added + 1], added[#added + 2] = score, member
  if other then
    if as_other then
      local gone_from = removed[other]
      gone_from[#gone_from + 1] = member
    end
    local j = view and i + 6 or i + 4
    show_user(member, score, when, A[j], A[j + 1], before)
  end
  plain_place(i, kind, member, score, when, field, view)
  return (not own or before < online_since) and '1' or '0'
end

-- Records ``views`` page views then ``others`` other requests from ``A[start]`` on, their
-- visitors into the HyperLogLog KEYS[hll] ('0': none), whose day ends at
-- ``arg.plain_day_end``, and appends whether each arrived to ``arrived``; returns the index of
-- the first value after them, and how many arrived.
local function record_plain(start, views, others, hll)
  local total = views + others
  if total == 0 then
    return start, 0
  end
  local at, slot, fields, lists, after = plain_entries(start, total, views)
  local read = plain_reads(lists)
  hread(where, fields)
  local adds = {users = {}, hidden = {}, guests = {}, bots = {}}
  local removed = {users = {}, hidden = {}}
  local arrivals, numbered = 0, #arrived
  for n = 1, total do
    entry_number = numbered + n
    local flag = plain_visit(at[n], slot[n], fields[n], n <= views, read, adds, removed, hll)
    arrived[entry_number] = flag
    arrivals = arrivals + (flag == '1' and 1 or 0)
  end
  for kind, set in pairs(sets) do
    if #adds[kind] > 0 then
      rcall('ZADD', set, unpack(adds[kind]))
    end
    if removed[kind] and #removed[kind] > 0 then
      rcall('ZREM', set, unpack(removed[kind]))
    end
  end
  write_held()
  return after, arrivals
end
