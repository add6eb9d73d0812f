--[[
  Sampling the online counts, shared by the scripts that do: ``raise_peak`` keeps the most people
  ever online, ``sample`` keeps the largest count seen in each slice of an ``online:*`` counter.

  Sampling walks the precisions from the finest up and stops at the first slice that already holds
  at least the count, when every coarser precision is a multiple of that one (a '1' in the may-stop
  flags): its slices then contain this one, and the write that filled it filled them too. Most
  calls thus read one field per counter instead of writing every precision.
]]

local function raise_peak(peak, people, now)
  if people > tonumber(redis.call('HGET', peak, 'count') or '0') then
    redis.call('HSET', peak, 'count', people, 'at', now)
  end
end

local function sample(known, prefix, precisions, may_stop, second, name, value)
  for i, precision in ipairs(precisions) do
    local counter = precision .. ':' .. name
    local slice = second - second % precision
    local current = redis.call('HGET', prefix .. counter, slice)
    if current and tonumber(current) >= value then
      if string.sub(may_stop, i, i) == '1' then
        return
      end
    elseif redis.call('HSET', prefix .. counter, slice, value) == 1 then
      redis.call('ZADD', known, 0, counter)
    end
  end
end

local function sample_all(known, prefix, precisions, may_stop, second, users, guests, bots)
  sample(known, prefix, precisions, may_stop, second, 'online:users', users)
  sample(known, prefix, precisions, may_stop, second, 'online:guests', guests)
  sample(known, prefix, precisions, may_stop, second, 'online:bots', bots)
end
