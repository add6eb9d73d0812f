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

-- A table of tables by key, each made on first use.
local function by_key()
  return setmetatable({}, {__index = function(tables, key)
    local made = {}
    tables[key] = made
    return made
  end})
end

local held_scores, held_fields = by_key(), by_key()
local written_scores, written_fields = by_key(), by_key()

local function as_score(value)
  return tonumber(value) or false
end

local function as_field(value)
  return value
end

-- Reads ``names`` of ``key`` in one ``command`` (ZMSCORE, HMGET) into ``held``, but those held
-- already, which the script may have written since.
local function read_ahead(command, held, key, names, convert)
  if #names == 0 then
    return
  end
  local found, values = redis.call(command, key, unpack(names)), held[key]
  for k, name in ipairs(names) do
    if values[name] == nil then
      values[name] = convert(found[k])
    end
  end
end

-- ``name`` of ``key`` as held, or read with ``command`` (ZSCORE, HGET) and held; nil if absent.
local function read_one(command, held, key, name, convert)
  local values = held[key]
  local value = values[name]
  if value == nil then
    value = convert(redis.call(command, key, name))
    values[name] = value
  end
  return value or nil
end

local function zread(key, members)
  read_ahead('ZMSCORE', held_scores, key, members, as_score)
end

local function zscore(key, member)
  return read_one('ZSCORE', held_scores, key, member, as_score)
end

-- ``when`` is ``score`` as a number, when the caller has it.
local function zadd(key, member, score, when)
  held_scores[key][member] = when or tonumber(score)
  written_scores[key][member] = score
end

-- Nothing is sent for a member known to be absent.
local function zrem(key, member)
  local scores = held_scores[key]
  if scores[member] ~= false then
    scores[member] = false
    written_scores[key][member] = false
  end
end

local function hread(key, fields)
  read_ahead('HMGET', held_fields, key, fields, as_field)
end

local function hget(key, field)
  return read_one('HGET', held_fields, key, field, as_field)
end

local function hset(key, field, value)
  held_fields[key][field] = value
  written_fields[key][field] = value
end

local function hdel(key, field)
  if held_fields[key][field] ~= false then
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
  written_scores, written_fields = by_key(), by_key()
end
