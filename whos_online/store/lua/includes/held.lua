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

-- Reads ``names`` of ``key`` in one ``command`` (ZMSCORE, HMGET) into ``held``, but those held
-- already, which the script may have written since; scores as numbers.
local function read_ahead(command, held, key, names, scores)
  if #names == 0 then
    return
  end
  local found, values = redis.call(command, key, unpack(names)), held[key]
  for k = 1, #names do
    local name, value = names[k], found[k]
    if values[name] == nil then
      values[name] = scores and value and tonumber(value) or value
    end
  end
end

local function zread(key, members)
  read_ahead('ZMSCORE', held_scores, key, members, true)
end

-- A member's score as held, or read and held; nil if absent.
local function zscore(key, member)
  local values = held_scores[key]
  local value = values[member]
  if value == nil then
    value = redis.call('ZSCORE', key, member)
    value = value and tonumber(value)
    values[member] = value
  end
  return value or nil
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
  read_ahead('HMGET', held_fields, key, fields, false)
end

-- A field's value as held, or read and held; nil if absent.
local function hget(key, field)
  local values = held_fields[key]
  local value = values[field]
  if value == nil then
    value = redis.call('HGET', key, field)
    values[field] = value
  end
  return value or nil
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
-- others (a ZADD takes its pairs score first, an HSET field first).
local function send_written(written, remove, set, score_first)
  for key, values in pairs(written) do
    local removed, kept = {}, {}
    for name, value in pairs(values) do
      local n = #kept
      if not value then
        removed[#removed + 1] = name
      elseif score_first then
        kept[n + 1], kept[n + 2] = value, name
      else
        kept[n + 1], kept[n + 2] = name, value
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
  send_written(written_scores, 'ZREM', 'ZADD', true)
  send_written(written_fields, 'HDEL', 'HSET', false)
  written_scores, written_fields = by_key(), by_key()
end
