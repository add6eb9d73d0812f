--[[
  The rooms of one shard whose people were seen last, newest first, each with how many of every
  kind are in it now: what the dashboard's busiest rooms are chosen from. Bounded: ARGV[3] rooms
  of four ZCOUNTs each.

  Input:
    KEYS[1]  the shard's sorted set of rooms, by their latest visit
    ARGV[1]  how the keys of a room's sets begin in this shard
    ARGV[2]  the score from which someone counts as online
    ARGV[3]  how many rooms to read

  Output:
    One row per room: {room, users, hidden, guests, bots}.
]]

local rooms = redis.call('ZREVRANGE', KEYS[1], 0, tonumber(ARGV[3]) - 1)
local found = {}
for i, room in ipairs(rooms) do
  local row = {room}
  for _, kind in ipairs({'users', 'hidden', 'guests', 'bots'}) do
    row[#row + 1] = redis.call('ZCOUNT', ARGV[1] .. room .. ':' .. kind, ARGV[2], '+inf')
  end
  found[i] = row
end
return found
