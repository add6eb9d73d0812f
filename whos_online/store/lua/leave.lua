--[[
  Takes a user off the online sets and out of the room they are in, and marks when they left, so
  that a visit of theirs from before (still on its way from a process, or sent again after an
  outage) is not recorded: a logout outside the queue, or an erasure, which also deletes the
  user's display HASH and their connections, takes them out of the rooms those hold, and removes
  them whenever they were seen. (A logout leaves the rooms of their connections to them: a
  connection holds the identity it was opened with until it leaves.)

  Input:
    KEYS[1]  the users sorted set
    KEYS[2]  the hidden users sorted set
    KEYS[3]  the shard's HASH of who is in which room
    KEYS[4]  the key that marks when the user left (see lua/record.lua, ``gone_prefix``)
    KEYS[5]  optional: the user's display HASH, to delete (an erasure)
    KEYS[6]  with KEYS[5]: the sorted set of the user's connections (see lua/record.lua)
    ARGV[1]  the user's member in those sets (their primary key)
    ARGV[2]  how the keys of a room's sets begin in this shard
    ARGV[3]  when they left (a score)
    ARGV[4]  seconds the mark lives
    ARGV[5…] the user's fields in the HASH of who is where, each an argument of its own (a
             primary key may hold any character)

  Output:
    1
]]

--- @include "includes/rooms"

local erasing = #KEYS >= 5
local left = tonumber(ARGV[3])
if not erasing then
  -- A logout: a visit from another device after it stands.
  for i = 1, 2 do
    local seen = redis.call('ZSCORE', KEYS[i], ARGV[1])
    if seen and tonumber(seen) > left then
      return 1
    end
  end
end
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
for i = 5, #ARGV do
  leave_room(KEYS[3], ARGV[2], ARGV[i], ARGV[1])
end
local marked = redis.call('GET', KEYS[4])
if not marked or tonumber(marked) < left then
  redis.call('SET', KEYS[4], ARGV[3], 'EX', ARGV[4])
end
if erasing then
  redis.call('DEL', KEYS[5])
  for _, link in ipairs(redis.call('ZRANGE', KEYS[6], 0, -1)) do
    local room = string.match(link, '^[^\255]*')
    redis.call('ZREM', ARGV[2] .. room .. ':users', ARGV[1])
    redis.call('ZREM', ARGV[2] .. room .. ':hidden', ARGV[1])
  end
  redis.call('DEL', KEYS[6])
end
return 1
