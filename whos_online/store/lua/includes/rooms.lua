--[[
  Leaving a room, shared by the scripts that move people out of one.

  The HASH ``where`` gives, by ``field`` ("u:<pk>" for a user, "<kind>:<member>" for a guest or
  bot), the room a person is in, or, after they left it (their page was closed, or their next
  page view was in no room), ``LEFT`` followed by that room: they are in no room, and only a
  page view puts them back in it, or the page's own word that they are still on it while they
  still count there (a reload; see lua/record.lua). Their member stays in the room's sets
  meanwhile, at a score that ends their count there, so that the cleanup finds it and takes the
  mark away with it (lua/prune_rooms.lua). A valid UTF-8 room name never holds the byte LEFT.

  ``room_in`` reads a value of ``where``: the room, and whether it was left. ``leave_room``
  takes ``member`` out of the room ``where`` gives for ``field``, left or not, from the sets of
  its kind (a user from both user sets), and forgets the field; it returns the room they were
  still in (nil when they were in none, or had left it already). The room's sets are named from
  ``room_prefix`` in Lua: they share the shard's hash tag, so they live in the slot of the
  declared keys.
]]

local LEFT = '\255'
local LEFT_BYTE = string.byte(LEFT)

local function room_in(value)
  if not value then
    return nil, false
  end
  if string.byte(value) == LEFT_BYTE then
    return string.sub(value, 2), true
  end
  return value, false
end

local function leave_room(where, room_prefix, field, member)
  local room, left = room_in(redis.call('HGET', where, field))
  if not room then
    return nil
  end
  local kind = string.match(field, '^[^:]+')
  if kind == 'u' then
    redis.call('ZREM', room_prefix .. room .. ':users', member)
    kind = 'hidden'
  end
  redis.call('ZREM', room_prefix .. room .. ':' .. kind, member)
  redis.call('HDEL', where, field)
  if left then
    return nil
  end
  return room
end
