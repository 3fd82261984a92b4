#!lua flags=no-writes
-- stripecount-redis: one key's ring and the namespace's configuration, in
-- one atomic read. Where rings live is described in src/bucket.rs.
-- KEYS: 1 namespace config, 2 the generation each of the 4 bucket slots
--       holds, 3..6 the key's sub-bucket in slots 0..3.
-- ARGV: 1 the key's field.
-- Replies { config or nil, ring or nil }: the ring of the slot of the latest
-- generation that holds one (the only one a live slot can hold).
local cfg = redis.call('GET', KEYS[1])
local gm = redis.call('GET', KEYS[2])
local best, bestg = false, -1
if gm and #gm == 32 then
  local gens = { struct.unpack('<dddd', gm) }
  for r = 0, 3 do
    local g = gens[r + 1]
    if g > bestg then
      local v = redis.call('HGET', KEYS[3 + r], ARGV[1])
      if v then best, bestg = v, g end
    end
  end
end
return { cfg, best }
