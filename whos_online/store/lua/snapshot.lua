--[[
  Reads one shard's part of a snapshot in one round trip: the counts of every kind, the newest
  visible users with their display data, the shard's visitors of the day and, for shard 0, the
  peak (which shares its slot). For a room, only its four sets are given.

  The per-user HASHes are not in KEYS because their names are only known once the range is read;
  they share the shard's hash tag, so they live in the same slot.

  Input:
    KEYS[1..4]  the users, hidden, guests and bots sorted sets
    KEYS[5]     the shard's epoch (see lua/record.lua)
    KEYS[6]     optional: the day's visitors HyperLogLog
    KEYS[7]     optional: the peak HASH
    ARGV[1]     the score from which someone counts as online
    ARGV[2]     how many users to list (-1 for all, 0 for none)
    ARGV[3]     how the keys of the users' display HASHes begin
    ARGV[4..]   optional: readers to look for, each a member and the index (1 to 4) of its set

  Output:
    {users, hidden, guests, bots,
     the listed users as one flat array (pk, score, name, url, pk, …),
     {peak count, peak time} or {},
     the day's visitors or 0,
     the shard's epoch, or '' when it has none,
     1 or 0 for each reader looked for: whether it counts as online in its set}
]]

local min = ARGV[1]
local result = {}
for i = 1, 4 do
  result[i] = redis.call('ZCOUNT', KEYS[i], min, '+inf')
end
-- The listed users as one flat array (pk, score, name, url, pk, …): a table per user costs more.
local listed = {}
local limit = tonumber(ARGV[2])
if limit ~= 0 then
  local ids = redis.call('ZREVRANGEBYSCORE', KEYS[1], '+inf', min, 'WITHSCORES', 'LIMIT', 0, limit)
  local n = 0
  for i = 1, #ids, 2 do
    local info = redis.call('HMGET', ARGV[3] .. ids[i], 'name', 'url')
    listed[n + 1] = ids[i]
    listed[n + 2] = ids[i + 1]
    listed[n + 3] = info[1] or ''
    listed[n + 4] = info[2] or ''
    n = n + 4
  end
end
result[5] = listed
if #KEYS >= 7 then
  result[6] = redis.call('HMGET', KEYS[7], 'count', 'at')
else
  result[6] = {}
end
if #KEYS >= 6 then
  result[7] = redis.call('PFCOUNT', KEYS[6])
else
  result[7] = 0
end
result[8] = redis.call('GET', KEYS[5]) or ''
local found = {}
for i = 4, #ARGV - 1, 2 do
  local seen = redis.call('ZSCORE', KEYS[tonumber(ARGV[i + 1])], ARGV[i])
  found[#found + 1] = (seen and tonumber(seen) >= tonumber(min)) and 1 or 0
end
result[9] = found
return result
