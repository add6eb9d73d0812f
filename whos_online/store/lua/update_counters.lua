--[[
  Adds amounts to counters at every precision, in one call; a batch of page hits is added once
  only (see includes/counters, ``add_batch``).

  Input:
    KEYS[1]   the sorted set of known counters
    ARGV[1]   how the keys of the counter HASHes begin
    ARGV[2]   the precisions, comma-separated
    ARGV[3]   the key that remembers the process's highest batch added ('' for no batch)
    ARGV[4]   the batch's number
    ARGV[5]   how long to remember it, in seconds
    ARGV[6]   how many increments follow
    ARGV[7…]  (counter name, Unix second, amount) for each increment

  Output:
    1
]]

--- @include "includes/counters"

add_batch(ARGV[1], KEYS[1], parse_precisions(ARGV[2]), 3)
return 1
