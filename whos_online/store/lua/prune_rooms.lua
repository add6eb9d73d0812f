--[[
  Prunes one page of a shard's rooms: reads the next page of the shard's index of rooms from a
  ZSCAN cursor and, for each room, takes the members last seen before a time out of the room's
  four sets, and out of the HASH of who is where when it still names this room for them (or
  says they left it: see includes/rooms). A room
  left with no member leaves the index, and its title the HASH of titles, so that no key of it is
  left and the cleanup stops visiting it. A room with nobody in it costs an EXISTS and a ZREM, so a page of them is cheap:
  a flood of empty rooms is walked a page per call, not a call per room.

  Bounded twice: a page is ARGV[4] rooms (ZSCAN's COUNT, which it may pass by a few), and at most
  ARGV[5] members are removed. When that many went before the page's end, the reply gives the
  cursor it was called with: the next call reads the same page again, where the rooms emptied are
  gone and the rest cost little, and goes on with the members left.

  ZSCAN, unlike a walk by score or rank, names every room that stays in the index for the whole
  walk, however the rooms' scores move and rooms leave meanwhile. A room's sets are named from
  ARGV[1] in Lua: they share the shard's hash tag, so they live in the slot of the declared keys.

  Input:
    KEYS[1]  the shard's sorted set of rooms
    KEYS[2]  the shard's HASH of who is in which room (``…rooms:where``; the HASH of the rooms'
             titles beside it, ``…rooms:titles``, is named from it)
    ARGV[1]  how the keys of a room's sets begin in this shard
    ARGV[2]  the score before which a member is stale
    ARGV[3]  the ZSCAN cursor to read the page from ('0' for the first page)
    ARGV[4]  how many rooms to read
    ARGV[5]  the most members to remove

  Output:
    {the cursor of the next page, members removed, rooms emptied, 1 if the index has been walked
    to its end else 0}
]]

--- @include "includes/rooms"

local index, where = KEYS[1], KEYS[2]
local titles = string.gsub(where, 'where$', 'titles')
local room_prefix, cutoff, budget = ARGV[1], '(' .. ARGV[2], tonumber(ARGV[5])
local kinds = {'users', 'hidden', 'guests', 'bots'}
-- How each kind's members are named in the HASH of who is where: users by pk, hidden or not.
local fields = {'u:', 'u:', 'guests:', 'bots:'}

-- Takes up to ``most`` members last seen before the cutoff out of a room's ``sets``; returns
-- how many went.
local function prune_sets(room, sets, most)
  local removed = 0
  for i, set in ipairs(sets) do
    if removed >= most then
      break
    end
    local stale = redis.call('ZRANGEBYSCORE', set, '-inf', cutoff, 'LIMIT', 0, most - removed)
    if #stale > 0 then
      redis.call('ZREM', set, unpack(stale))
      for _, member in ipairs(stale) do
        if room_in(redis.call('HGET', where, fields[i] .. member)) == room then
          redis.call('HDEL', where, fields[i] .. member)
        end
      end
      removed = removed + #stale
    end
  end
  return removed
end

local page = redis.call('ZSCAN', index, ARGV[3], 'COUNT', ARGV[4])
local removed, emptied = 0, 0
for i = 1, #page[2], 2 do
  local room = page[2][i]
  local sets = {}
  for k, kind in ipairs(kinds) do
    sets[k] = room_prefix .. room .. ':' .. kind
  end
  local left = redis.call('EXISTS', unpack(sets))
  if left > 0 then
    if removed >= budget then
      return {ARGV[3], removed, emptied, 0}
    end
    removed = removed + prune_sets(room, sets, budget - removed)
    left = redis.call('EXISTS', unpack(sets))
  end
  if left == 0 then
    -- ZSCAN may name a room twice: the second ZREM finds nothing, and it is counted once.
    emptied = emptied + redis.call('ZREM', index, room)
    redis.call('HDEL', titles, room)
  elseif removed >= budget then
    return {ARGV[3], removed, emptied, 0}
  end
end
return {page[1], removed, emptied, page[1] == '0' and 1 or 0}
