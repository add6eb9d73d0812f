--[[
  Removes one chunk of the members of a sorted set last seen before a time. Reading and removing
  in one script keeps a member that is seen again between the two steps from being removed while
  online, and keeps each call short enough not to stall Redis.

  Input:
    KEYS[1]  the sorted set
    ARGV[1]  the score before which a member is stale
    ARGV[2]  the most members to remove

  Output:
    the members removed
]]

local stale = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', '(' .. ARGV[1], 'LIMIT', 0, ARGV[2])
if #stale > 0 then
  redis.call('ZREM', KEYS[1], unpack(stale))
end
return stale
