--[[
  Sorted sets and HASHes read through the script and written once, at its end.

  ``zscore``/``hget`` read a member's score or a field, once: later reads, and the script's own
  writes (``zadd``, ``zrem``, ``hset``, ``hdel``), are kept here, so that a read sees what the
  script wrote before it. ``zread``/``hread`` read many members or fields of one key in a
  command (ZMSCORE, HMGET) ahead of the reads that need them. ``write_held`` sends the writes,
  one ZREM and one ZADD per sorted set, one HDEL and one HSET per HASH: what stays in Redis
  is each member's or field's last value, as if every write had been sent at its turn.

  Scores are read as numbers; a score written is sent as given (a string keeps its digits).
]]

local held_scores, held_fields = {}, {}
local written_scores, written_fields = {}, {}

local function of(held, key)
  local found = held[key]
  if not found then
    found = {}
    held[key] = found
  end
  return found
end

local function zread(key, members)
  if #members == 0 then
    return
  end
  local found, scores = redis.call('ZMSCORE', key, unpack(members)), of(held_scores, key)
  for k, member in ipairs(members) do
    if scores[member] == nil then
      scores[member] = tonumber(found[k]) or false
    end
  end
end

local function zscore(key, member)
  local scores = held_scores[key] or of(held_scores, key)
  local score = scores[member]
  if score == nil then
    score = tonumber(redis.call('ZSCORE', key, member)) or false
    scores[member] = score
  end
  return score or nil
end

-- ``when`` is ``score`` as a number, when the caller has it.
local function zadd(key, member, score, when)
  (held_scores[key] or of(held_scores, key))[member] = when or tonumber(score);
  (written_scores[key] or of(written_scores, key))[member] = score
end

-- Nothing is sent for a member known to be absent.
local function zrem(key, member)
  local scores = held_scores[key] or of(held_scores, key)
  if scores[member] ~= false then
    scores[member] = false;
    (written_scores[key] or of(written_scores, key))[member] = false
  end
end

local function hread(key, fields)
  if #fields == 0 then
    return
  end
  local found, values = redis.call('HMGET', key, unpack(fields)), of(held_fields, key)
  for k, field in ipairs(fields) do
    if values[field] == nil then
      values[field] = found[k]
    end
  end
end

local function hget(key, field)
  local values = held_fields[key] or of(held_fields, key)
  local value = values[field]
  if value == nil then
    value = redis.call('HGET', key, field)
    values[field] = value
  end
  return value or nil
end

local function hset(key, field, value)
  (held_fields[key] or of(held_fields, key))[field] = value;
  (written_fields[key] or of(written_fields, key))[field] = value
end

local function hdel(key, field)
  if (held_fields[key] or of(held_fields, key))[field] ~= false then
    hset(key, field, false)
  end
end

-- Sends ``written``'s values of each key: REMOVE for those written false, then SET for the
-- others (a SET takes pairs; ``pair`` puts them in its order).
local function send_written(written, remove, set, pair)
  for key, values in pairs(written) do
    local removed, kept = {}, {}
    for name, value in pairs(values) do
      if value then
        pair(kept, name, value)
      else
        removed[#removed + 1] = name
      end
    end
    if #removed > 0 then
      redis.call(remove, key, unpack(removed))
    end
    if #kept > 0 then
      redis.call(set, key, unpack(kept))
    end
  end
end

local function write_held()
  send_written(written_scores, 'ZREM', 'ZADD', function(list, member, score)
    list[#list + 1] = score
    list[#list + 1] = member
  end)
  send_written(written_fields, 'HDEL', 'HSET', function(list, field, value)
    list[#list + 1] = field
    list[#list + 1] = value
  end)
  written_scores, written_fields = {}, {}
end
