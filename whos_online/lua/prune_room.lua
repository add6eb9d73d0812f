--[[
  Prunes one room in one shard, a chunk at a time: takes the members last seen before a time out
  of the room's four sets, and out of the HASH of who is where when it still names this room for
  them. A room left with no member leaves the index of rooms, so that the cleanup stops visiting
  it and no key of it is left.

  Input:
    KEYS[1..4]  the room's users, hidden, guests and bots sorted sets
    KEYS[5]     the shard's HASH of who is in which room
    KEYS[6]     the shard's sorted set of rooms
    ARGV[1]     the score before which a member is stale
    ARGV[2]     the most members to remove
    ARGV[3]     the room's name

  Output:
    {members removed, 1 if the room is gone else 0}
]]

local cutoff, chunk, room = '(' .. ARGV[1], tonumber(ARGV[2]), ARGV[3]
local kinds = {'users', 'hidden', 'guests', 'bots'}
local removed = 0
for i = 1, 4 do
  if removed >= chunk then
    return {removed, 0}
  end
  local stale = redis.call('ZRANGEBYSCORE', KEYS[i], '-inf', cutoff, 'LIMIT', 0, chunk - removed)
  if #stale > 0 then
    redis.call('ZREM', KEYS[i], unpack(stale))
    local prefix = i <= 2 and 'u:' or kinds[i] .. ':'
    for _, member in ipairs(stale) do
      if redis.call('HGET', KEYS[5], prefix .. member) == room then
        redis.call('HDEL', KEYS[5], prefix .. member)
      end
    end
    removed = removed + #stale
  end
end
if removed < chunk and redis.call('EXISTS', KEYS[1], KEYS[2], KEYS[3], KEYS[4]) == 0 then
  redis.call('ZREM', KEYS[6], room)
  return {removed, 1}
end
return {removed, 0}
