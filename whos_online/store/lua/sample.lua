--[[
  Raises the peak and samples the online counters from the site-wide counts, as the cleanup
  command reads them from every shard (a visit cannot count the whole site when there are
  several).

  Input:
    KEYS[1]  the peak HASH
    KEYS[2]  the sorted set of known counters
    ARGV[1]  the time (the peak's 'at')
    ARGV[2]  how the keys of the counter HASHes begin
    ARGV[3]  the counters' precisions, comma-separated
    ARGV[4]  one '1' or '0' per precision (see includes/sampling)
    ARGV[5]  the Unix second sampled
    ARGV[6]  the users online (hidden ones included)
    ARGV[7]  the guests online
    ARGV[8]  the bots online

  Output:
    1
]]

--- @include "includes/counters"
--- @include "includes/sampling"

local users, guests, bots = tonumber(ARGV[6]), tonumber(ARGV[7]), tonumber(ARGV[8])
raise_peak(KEYS[1], users + guests, ARGV[1])
sample_all(KEYS[2], ARGV[2], parse_precisions(ARGV[3]), ARGV[4], tonumber(ARGV[5]),
  users, guests, bots)
return 1
