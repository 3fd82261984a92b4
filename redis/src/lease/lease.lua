#!lua
-- stripecount-redis: return a node's unused permits and lease a batch of one
-- key's permits, on server time, exactly once. The protocol is described in
-- src/lease/script.rs, the invariant it keeps in src/lease/mod.rs.
--
-- KEYS: 1 node record, 2 namespace config, 3 the key leased from (unused
--       when need is 0), 4.. keys returned to.
-- ARGV: 1 sequence, 2 J: the slices a request is judged against (the
--       quota's slices, one more when it is strict), 3 slice ms, 4 limit,
--       5 need (0: lease nothing), 6 want, 7 record ttl ms, 8 config
--       string, then per returned key: its slice (epoch) and the permits
--       returned.
-- "The window" below is the last J slices: a request fits if the window's
-- permits plus the request are at most the limit.
-- A key's value: a hash, field = slice, value = permits leased in it less
-- those returned; it expires when its newest slice leaves the window.
local seq = tonumber(ARGV[1])
local J = tonumber(ARGV[2])
local slice_ms = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local need = tonumber(ARGV[5])
local want = tonumber(ARGV[6])
local ttl = tonumber(ARGV[7])
local nret = #KEYS - 3

-- Every check before the first write.
if nret < 0 or #ARGV ~= 8 + 2 * nret then
  return redis.error_reply('SARGS bad argument count')
end
local cfg = redis.call('GET', KEYS[2])
if cfg and cfg ~= ARGV[8] then
  return redis.error_reply('SCFG the namespace is configured as ' .. cfg .. ', this node as ' .. ARGV[8])
end
local rec = redis.call('GET', KEYS[1])
local last, lg, le = -1, 0, 0
if rec then last, lg, le = struct.unpack('<ddd', rec) end
if seq < last then
  return redis.error_reply('SSEQ request ' .. seq .. ' is older than the last applied, ' .. last)
end

local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local slice_us = slice_ms * 1000
local cur = (now_us - now_us % slice_us) / slice_us

-- Applied before and its reply lost: answer again (the lease's slice and
-- what it granted, with the time left in that slice now), change nothing
-- but the record's expiry: rewriting it makes a WAIT after this reply
-- cover the request's first application (a replica's data is a prefix of
-- its master's writes), even on another connection.
if seq == last then
  redis.call('SET', KEYS[1], rec, 'PX', ttl)
  return { 1, lg, le, (le + 1) * slice_us - now_us, t[1], t[2], -1 }
end

local floor = cur - J
-- Returns only lower a live slice's count, never below 0; a slice that
-- left the window is gone already.
for i = 1, nret do
  local e = tonumber(ARGV[7 + 2 * i])
  local n = tonumber(ARGV[8 + 2 * i])
  if e > floor and n > 0 then
    local k = KEYS[3 + i]
    local c = tonumber(redis.call('HGET', k, ARGV[7 + 2 * i]) or '0')
    if c > n then
      redis.call('HINCRBY', k, ARGV[7 + 2 * i], -n)
    elseif c > 0 then
      redis.call('HDEL', k, ARGV[7 + 2 * i])
    end
  end
end

local granted = 0
-- Refused: server microseconds until enough of the window's oldest
-- slices leave it for the request to fit (-1: not refused).
local retry = -1
if need > 0 then
  local h = redis.call('HGETALL', KEYS[3])
  local sum, old, live = 0, {}, {}
  for j = 1, #h, 2 do
    local e = tonumber(h[j])
    if e <= floor then
      old[#old + 1] = h[j]
    else
      sum = sum + tonumber(h[j + 1])
      live[#live + 1] = { e, tonumber(h[j + 1]) }
    end
  end
  if #old > 0 then redis.call('HDEL', KEYS[3], unpack(old)) end
  local room = limit - sum
  if room >= need then
    -- At least what the caller needs; beyond it, what the node wants but
    -- at most half the room left, so that near the limit batches shrink
    -- (down to 1) and no node sits on the last permits.
    local extra = math.min(want, math.ceil(room / 2))
    granted = math.min(room, math.max(need, extra))
    redis.call('HINCRBY', KEYS[3], string.format('%d', cur), granted)
    -- Expires when its newest slice (this one) leaves the window.
    redis.call('PEXPIREAT', KEYS[3], (cur + J) * slice_ms)
  elseif need <= limit then
    table.sort(live, function(a, b) return a[1] < b[1] end)
    local left = sum
    for _, x in ipairs(live) do
      left = left - x[2]
      if limit - left >= need then
        retry = (x[1] + J) * slice_us - now_us
        break
      end
    end
  end
end
redis.call('SET', KEYS[1], struct.pack('<ddd', seq, granted, cur), 'PX', ttl)
redis.call('SET', KEYS[2], ARGV[8], 'PX', ttl)
return { 0, granted, cur, (cur + 1) * slice_us - now_us, t[1], t[2], retry }
