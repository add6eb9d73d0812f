--[[
  Drops a counter whose precision is no longer configured. UNLINK frees a big HASH off the main
  thread; the name goes in the same step, so a late writer with the old settings re-adds both.

  Input:
    KEYS[1]  the counter HASH
    KEYS[2]  the sorted set of known counters
    ARGV[1]  the counter's member in that set (<precision>:<name>)

  Output:
    how many slices the counter held
]]

local removed = redis.call('HLEN', KEYS[1])
redis.call('UNLINK', KEYS[1])
redis.call('ZREM', KEYS[2], ARGV[1])
return removed
