--[[
  The record script's rooms: where a visit puts its person, and how a person leaves a room.

  Part of lua/record.lua, included where its locals are set: it uses ``where``, ``titles``,
  ``links_prefix``, ``room_prefix``, ``window``, ``arg``, ``place``, ``changed`` and the held reads
  and writes (includes/held). docs/how-it-works.md tells what a room mode does.
]]

-- A room's sets are read and written at each entry's turn, not held (includes/held): a batch's
-- visits are in many rooms, a command each either way.
local function room_set(room, kind)
  return room_prefix .. room .. ':' .. kind
end

local function room_score(set, member)
  return tonumber(redis.call('ZSCORE', set, member))
end

-- Between a connection's room and its id in a member of ``links:<person>``.
local LINK = '\255'
-- The rooms a person's connections hold when none was looked for, or none is held (read, never
-- written).
local NONE_HELD = {}

-- The rooms where the person of ``field`` holds a connection renewed within the window of
-- ``score``, as a set: empty for whoever holds none (one read of a key that does not exist).
-- The links are read whole and their scores compared here: a bound sent to ZRANGEBYSCORE would
-- be a number formatted as a string at every call, for the few people who hold any.
local function linked_rooms(field, score)
  local links = redis.call('ZRANGE', links_prefix .. field, '0', '-1', 'WITHSCORES')
  if #links == 0 then
    return NONE_HELD
  end
  local held, since = {}, tonumber(score) - window
  for k = 1, #links, 2 do
    if tonumber(links[k + 1]) > since then
      held[string.match(links[k], '^[^\255]*')] = true
    end
  end
  return held
end

-- Whether ``member`` still counts in ``room`` (in one of its sets of ``kinds``) at ``when``.
local function counted_in(room, kinds, member, when)
  for k = 1, #kinds do
    local seen = room_score(room_set(room, kinds[k]), member)
    if seen and seen > when - window then
      return true
    end
  end
  return false
end

-- Marks that ``member`` left ``room`` at ``left``: they count there ``grace`` seconds more
-- (-1: not at all), unless a connection of theirs ``holds`` the room, or they were seen there
-- after they left; the cleanup takes the member, and the mark, away later.
local function mark_left(room, kinds, member, left, grace, holds)
  left = tonumber(left)
  local edge = left - window + grace
  for k = 1, #kinds do
    local set = room_set(room, kinds[k])
    local seen = room_score(set, member)
    if not holds and seen and seen > edge and seen <= left then
      redis.call('ZADD', set, 'XX', edge, member)
    end
  end
  hset(where, place(kinds[1], member), LEFT .. room)
end

-- Whether the person of ``field`` reads a page of ``room`` now, and whether they left it.
local function page_room_of(field, room)
  local was, left = room_in(hget(where, field))
  return was == room and not left, was == room and left
end

-- The room a visit leaves its person in, by its mode: 'go' (a page view) into ``entry.room``;
-- 'keep' wherever they are; 'stay' into ``entry.room`` unless they are in another room, or left
-- it and no longer count there (the page's word after a reload).
local function room_wanted(entry, was, left, kinds)
  local mode, room = entry.mode, entry.room
  if mode == 'keep' then
    return left and '' or (was or '')
  elseif mode == 'stay' and left then
    if was ~= room or not counted_in(was, kinds, entry.member, entry.when) then
      return ''
    end
  elseif mode == 'stay' and was and was ~= room then
    return was
  end
  return room
end

-- Puts the visit's person in the room its mode says (out of theirs), in the room sets of
-- ``kinds``; a room a connection of theirs holds they neither leave nor enter. Returns the room.
local function place_in_room(entry, kinds)
  local kind, member, score, field = entry.kind, entry.member, entry.score, entry.place
  local was, left = room_in(hget(where, field))
  if not was and entry.room == '' then
    return '' -- in no room, and into none: most visits of most sites
  end
  local room = room_wanted(entry, was, left, kinds)
  local leaving = was and not left and was ~= room
  local entering = room ~= '' and (was ~= room or left)
  local held = (leaving or entering) and linked_rooms(field, score) or NONE_HELD
  local leaves, enters = leaving and not held[was], entering and not held[room]
  if leaves or enters then
    changed('', leaves and was or '', enters and room or '')
  end
  if was and (was ~= room or left) then
    if room == '' then
      if not left then
        mark_left(was, kinds, member, score, -1, held[was]) -- out at once, marked as left
      end
    elseif not held[was] then
      for k = 1, #kinds do
        redis.call('ZREM', room_set(was, kinds[k]), member)
      end
    end
  end
  if entering then
    hset(where, field, room)
    if entry.title ~= '' then
      hset(titles, room, entry.title)
    end
  end
  if room ~= '' then
    redis.call('ZADD', room_set(room, kind), score, member)
    for k = 1, #kinds do
      if kinds[k] ~= kind then
        redis.call('ZREM', room_set(room, kinds[k]), member)
      end
    end
  end
  return room
end
