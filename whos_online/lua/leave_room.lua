--[[
  A page's reader leaving it (``views.presence``): if the shard's HASH of who is where still puts
  the person in the room, they are marked as seen in that room's sets no later than the given
  time: the window's edge plus a few seconds' grace. Readers of the room stop counting them then,
  unless a page of the same room (a reload, the next page) says they are still there meanwhile.
  They stay online site-wide, and the cleanup takes them out of the room as usual.

  Input:
    KEYS[1]   the shard's HASH of who is in which room
    ARGV[1]   the room
    ARGV[2]   the person's field in that HASH
    ARGV[3]   the person's member in the room's sets
    ARGV[4]   how the keys of a room's sets begin in this shard
    ARGV[5…]  the kinds of the room's sets the member may be in ('users' and 'hidden' for a
              user, their kind for a guest or bot), and last the latest score they keep there

  Output:
    1 if the person was in the room, else 0.
]]

if redis.call('HGET', KEYS[1], ARGV[2]) ~= ARGV[1] then
  return 0
end
local edge = ARGV[#ARGV]
for i = 5, #ARGV - 1 do
  local set = ARGV[4] .. ARGV[1] .. ':' .. ARGV[i]
  local seen = redis.call('ZSCORE', set, ARGV[3])
  if seen and tonumber(seen) > tonumber(edge) then
    redis.call('ZADD', set, 'XX', edge, ARGV[3])
  end
end
return 1
