--[[
  The record script's connections: a person's connection entering (or renewing) its room, and
  leaving it. A person's connections are kept in ``links:<person>`` (member: the room, LINK and
  the connection; score: its last renewal), which outlives its last renewal's window by
  LINKS_OUTLIVE seconds.

  Part of lua/record.lua, included after includes/record_rooms, whose functions it uses, with
  ``links_prefix``, ``window``, ``place``, ``room_set`` and ``changed``.
]]

local LINKS_OUTLIVE = 60

-- 'e', after its visit: the connection holds its person in its room, in its set of their kind.
local function enter_link(entry)
  local kind, member, score, room = entry.kind, entry.member, entry.score, entry.room
  local field = entry.place
  local links = links_prefix .. field
  local _, left_page = page_room_of(field, room)
  local set = room_set(room, kind)
  local seen = room_score(set, member)
  local since = tonumber(score) - window
  local counted = not left_page and seen and seen > since
  redis.call('ZREMRANGEBYSCORE', links, '-inf', since)
  redis.call('ZADD', links, score, room .. LINK .. entry.connection)
  redis.call('EXPIRE', links, math.ceil(window) + LINKS_OUTLIVE)
  if not seen or seen < tonumber(score) then
    redis.call('ZADD', set, score, member)
  end
  local other = OTHER_USER_SET[kind]
  local as_other = other and room_score(room_set(room, other), member)
  if as_other then
    -- In the room as the other kind of user until now (they were hidden, or were not).
    counted = counted or (not left_page and as_other > since)
    redis.call('ZREM', room_set(room, other), member)
  end
  if not counted then
    changed('', '', room)
  end
end

-- 'x': the connection leaves its room; their last live one there takes them out of it, unless
-- it is their page room.
local function leave_link(entry)
  local kind, member, score, room = entry.kind, entry.member, entry.score, entry.room
  local field = entry.place
  if redis.call('ZREM', links_prefix .. field, room .. LINK .. entry.connection) == 0 then
    return -- never entered, or it and its key died long ago
  end
  local page, left_page = page_room_of(field, room)
  if page or linked_rooms(field, score)[room] then
    return
  end
  local kinds = ROOM_KINDS[kind]
  local counted = not left_page and counted_in(room, kinds, member, entry.when)
  local held_by
  for _, set_kind in ipairs(kinds) do
    if redis.call('ZREM', room_set(room, set_kind), member) == 1 then
      held_by = held_by or set_kind
    end
  end
  if left_page then
    hdel(where, field)
  end
  if counted then
    -- Told as the kind of the set that held them: a hidden user must not be told as shown.
    changed((held_by or kind) .. ':' .. member, room, '')
  end
end
