--[[
  Takes a person off two online sets and out of the rooms they are in, and deletes one more key
  when given: a former identity in a shard of its own (a login or logout whose two identities fall
  in different shards), a logout, an erasure.

  Input:
    KEYS[1]  one sorted set the person leaves
    KEYS[2]  the other sorted set the person leaves
    KEYS[3]  the shard's HASH of who is in which room
    KEYS[4]  optional: a key to delete (the user's display HASH, on erasure)
    ARGV[1]  the person's member in those sets
    ARGV[2]  how the keys of a room's sets begin in this shard
    ARGV[3…] the person's fields in the HASH of who is where, each an argument of its own (a
             primary key may hold any character)

  Output:
    1
]]

--- @include "includes/rooms"

redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREM', KEYS[2], ARGV[1])
for i = 3, #ARGV do
  leave_room(KEYS[3], ARGV[2], ARGV[i], ARGV[1])
end
if #KEYS >= 4 then
  redis.call('DEL', KEYS[4])
end
return 1
