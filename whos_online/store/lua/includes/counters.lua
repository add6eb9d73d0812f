--[[
  Adding to time-series counters, shared by the scripts that do.

  ``precisions`` is a list of numbers, read with ``parse_precisions`` from the comma-separated
  argument that ``counters.precisions_arg`` makes. ARGV[first] is how many increments follow, then
  (name, Unix second, amount) for each. Each amount goes to the slice holding its second at every
  precision.

  Amounts go to HINCRBY as the strings they came as: a Lua number is a double and would round big
  counts. A reply equal to the amount means the field was new (or held 0), so the HASH may be new:
  its name then joins the known set, in the same script, as cleaning needs. (Comparing two doubles
  that round the same integer is exact; one that rounds equal by chance only adds a name that is
  already there.)
]]

local function parse_precisions(text)
  local found = {}
  for precision in string.gmatch(text, '%d+') do
    found[#found + 1] = tonumber(precision)
  end
  return found
end

-- Returns the index of the first ARGV after the increments.
local function add_increments(counter_prefix, known, precisions, first)
  local count = tonumber(ARGV[first])
  for i = first + 1, first + 3 * count, 3 do
    local name, second, amount = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
    for _, precision in ipairs(precisions) do
      local member = precision .. ':' .. name
      local slice = second - second % precision
      if redis.call('HINCRBY', counter_prefix .. member, slice, amount) == tonumber(amount) then
        redis.call('ZADD', known, 0, member)
      end
    end
  end
  return first + 3 * count + 1
end

-- A batch of page hits (see ``hits``): ARGV[first] is the key that remembers the highest batch
-- number its process added ('' for increments that are not a batch), ARGV[first + 1] the batch's
-- number and ARGV[first + 2] how long to remember it; then the increments. A batch that was added
-- already (its first write timed out on the way back) is skipped.
local function add_batch(counter_prefix, known, precisions, first)
  local applied, number = ARGV[first], ARGV[first + 1]
  if applied ~= '' then
    local last = redis.call('GET', applied)
    if last and tonumber(last) >= tonumber(number) then
      return
    end
    redis.call('SET', applied, number, 'EX', ARGV[first + 2])
  end
  add_increments(counter_prefix, known, precisions, first + 3)
end
