--[[
  The record script's leavings: a former person leaving the online sets and their room, a
  logout's mark, a page's reader leaving its room.

  Part of lua/record.lua, included after includes/record_rooms, whose functions it uses, with
  ``sets``, ``gone_marks``, ``gone_prefix``, ``window``, ``arg``, ``place``, ``room_set`` and
  ``changed``.
]]

-- Takes ``member`` out of the room ``field`` names for them, from the room sets of ``kinds``,
-- and forgets the field; returns the room they were still in (nil if none, or left already).
local function leave_place(field, member, kinds)
  local room, left = room_in(hget(where, field))
  if not room then
    return nil
  end
  for _, kind in ipairs(kinds) do
    redis.call('ZREM', room_set(room, kind), member)
  end
  hdel(where, field)
  return not left and room or nil
end

-- Takes ``member`` off the ``kinds`` sets and out of its room, as of ``score``: unless one of
-- those sets saw it after that (the same address's next visitor, a user's other device).
local function leave_as_of(kinds, prefixes, member, score)
  local held = {}
  for _, kind in ipairs(kinds) do
    local seen = zscore(sets[kind], member)
    if seen and seen > tonumber(score) then
      return
    end
    held[#held + 1] = seen and kind or nil
  end
  for _, kind in ipairs(held) do
    zrem(sets[kind], member)
  end
  for _, prefix in ipairs(prefixes) do
    local kind = string.sub(prefix, 1, -2)
    -- A user held by neither user set (pruned before their room) is told as hidden: never named
    -- by mistake.
    local room = leave_place(prefix .. member, member, kind == 'u' and ROOM_KINDS.users or {kind})
    if room then
      changed((kind == 'u' and (held[1] or 'hidden') or kind) .. ':' .. member, room, '')
    end
  end
end

-- A user who logged out at ``score``: their visits from before are not recorded for a window.
local function mark_gone(pk, score)
  local marked = gone_marks[pk]
  if marked == nil then
    marked = redis.call('GET', gone_prefix .. pk)
  end
  if not marked or tonumber(marked) < tonumber(score) then
    redis.call('SET', gone_prefix .. pk, score, 'EX', window)
    marked = score
  end
  gone_marks[pk] = marked
end

-- 'l': a person leaving this shard's sets and rooms (a logout, a former person of another shard).
local function leave_identity(kind, member, score)
  local left = FORMER[kind == 'users' and 'guests' or 'users']
  leave_as_of(left[1], left[2], member, score)
  if kind == 'users' then
    mark_gone(member, score)
  end
end

-- 'r': a page's reader leaving its room; they count there ``leave_grace`` seconds more, unless a
-- connection of theirs holds the room, if it is still theirs.
local function leave_page_room(entry)
  local kind, member, room, field = entry.kind, entry.member, entry.room, entry.place
  local was, gone = room_in(hget(where, field))
  if was ~= room or gone then
    return
  end
  local held = linked_rooms(field, entry.score)[room]
  mark_left(room, ROOM_KINDS[kind], member, entry.score, tonumber(arg.leave_grace), held)
  if not held then
    changed('', room, '')
  end
end
