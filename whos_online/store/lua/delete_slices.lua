--[[
  Deletes stale slices of one counter HASH and, in the same step, forgets the HASH when it is left
  empty: a counter HASH that exists is always named in the known set, so that an update landing
  during a clean either keeps the name or adds it back.

  Input:
    KEYS[1]   the counter HASH
    KEYS[2]   the sorted set of known counters
    ARGV[1]   the counter's member in that set (<precision>:<name>)
    ARGV[2…]  the slices to delete (none: only forget the HASH if it is empty)

  Output:
    how many slices were deleted
]]

local removed = 0
if #ARGV > 1 then
  removed = redis.call('HDEL', KEYS[1], unpack(ARGV, 2))
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('ZREM', KEYS[2], ARGV[1])
end
return removed
