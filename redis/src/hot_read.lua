#!lua flags=no-writes
-- stripecount-redis: the hot-set changes since version ARGV[1] (all of it if
-- 0, or if the server's version is behind it: the server lost its state).
-- KEYS: 1 hot set (score: until epoch), 2 hot changes (score: version),
--       3 hot version.
local ver = tonumber(redis.call('GET', KEYS[3]) or '0')
local since = tonumber(ARGV[1])
local full = 0
if since == 0 or since > ver then
  since = 0
  full = 1
end
local ks = redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. since, '+inf')
local out = { ver, full }
for _, k in ipairs(ks) do
  local u = redis.call('ZSCORE', KEYS[1], k)
  if u then
    out[#out + 1] = k
    out[#out + 1] = u
  end
end
return out
