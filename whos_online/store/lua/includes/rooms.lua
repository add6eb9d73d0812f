--[[
  Leaving a room, shared by the scripts that move people out of one.

  ``leave_room`` takes ``member`` out of the room that the HASH ``where`` gives for ``field``
  ("u:<pk>" for a user, "<kind>:<member>" for a guest or bot), from the sets of its kind (a user
  from both user sets), and forgets the field. The room's sets are named from ``room_prefix`` in
  Lua: they share the shard's hash tag, so they live in the slot of the declared keys.
]]

local function leave_room(where, room_prefix, field, member)
  local room = redis.call('HGET', where, field)
  if not room then
    return
  end
  local kind = string.match(field, '^[^:]+')
  local sets = kind == 'u' and {'users', 'hidden'} or {kind}
  for _, set in ipairs(sets) do
    redis.call('ZREM', room_prefix .. room .. ':' .. set, member)
  end
  redis.call('HDEL', where, field)
end
