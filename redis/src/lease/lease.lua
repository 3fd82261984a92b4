#!lua
-- stripecount-redis: return a node's unused permits and lease a batch of
-- permits of each of several keys, on server time, exactly once. The
-- protocol is described in src/lease/script.rs, the invariant it keeps in
-- src/lease/mod.rs.
--
-- KEYS: 1 node record, 2 namespace config, then the m keys leased from
--       (each once), then the keys returned to.
-- ARGV: 1 sequence, 2 J: the slices a request is judged against (the
--       quota's slices, one more when it is strict), 3 slice ms, 4 limit,
--       5 record ttl ms, 6 config string, 7 m, 8 per leased key its need
--       (at least this many, or none) and want, as little-endian doubles
--       (16 bytes a key: read without a strtod each), then per returned
--       key: its slice (epoch) and the permits returned.
-- "The window" below is the last J slices: a lease fits if the window's
-- permits plus its need are at most the limit.
-- A key's value: a hash, field = slice, value = permits leased in it less
-- those returned; it expires when its newest slice leaves the window.
-- Costs, counted by callgrind on redis-server 7.0 (instructions): a
-- redis.call about 3,000 before its command's own work; a tonumber of a
-- string (strtod) about 2,000; a Lua number given to redis.call is
-- formatted with a floating-point printf. So numbers that Redis reads go
-- as strings (the record's lifetime as its argument, the grant formatted
-- with %d), needs and wants are unpacked from doubles, and the loop over
-- the keys calls no library function it can do without.
local call, fmt, unpack_asks = redis.call, string.format, struct.unpack
local seq = tonumber(ARGV[1])
local J = tonumber(ARGV[2])
local slice_ms = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local ttl = tonumber(ARGV[5])
local m = tonumber(ARGV[7])
local nret = #KEYS - 2 - (m or 0)

-- Every check before the first write.
if not (seq and J and slice_ms and limit and ttl and m) or m < 0 or nret < 0
    or #ARGV ~= 8 + 2 * nret or #ARGV[8] ~= 16 * m then
  return redis.error_reply('SARGS bad arguments: a count or setting is missing or not a number')
end
local cfg = redis.call('GET', KEYS[2])
if cfg and cfg ~= ARGV[6] then
  return redis.error_reply('SCFG the namespace is configured as ' .. cfg .. ', this node as ' .. ARGV[6])
end
-- The record: the last applied sequence, its slice, then what each of its
-- leases granted (doubles).
local rec = redis.call('GET', KEYS[1])
local last, le = -1, 0
if rec then last, le = struct.unpack('<dd', rec) end
if seq < last then
  return redis.error_reply('SSEQ request ' .. seq .. ' is older than the last applied, ' .. last)
end

local t = redis.call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local slice_us = slice_ms * 1000
local cur = (now_us - now_us % slice_us) / slice_us

-- Applied before and its reply lost: answer again (the leases' slice and
-- what each granted, with the time left in that slice now), change
-- nothing but the record's expiry: rewriting it makes a WAIT after this
-- reply cover the request's first application (a replica's data is a
-- prefix of its master's writes), even on another connection.
if seq == last then
  redis.call('SET', KEYS[1], rec, 'PX', ARGV[5])
  return { 1, le, (le + 1) * slice_us - now_us, t[1], t[2], string.sub(rec, 17) }
end

local floor = cur - J
-- Returns only lower a live slice's count, never below 0; a slice that
-- left the window is gone already.
local rk, ra = 2 + m, 8
for i = 1, nret do
  local f = ARGV[ra + 2 * i - 1]
  local n = tonumber(ARGV[ra + 2 * i])
  if tonumber(f) > floor and n > 0 then
    local k = KEYS[rk + i]
    local c = tonumber(redis.call('HGET', k, f) or '0')
    if c > n then
      redis.call('HINCRBY', k, f, -n)
    elseif c > 0 then
      redis.call('HDEL', k, f)
    end
  end
end

-- The reply: replayed (0), the slice, the microseconds left in it, the
-- server's time, then (out[6], filled last) the grants as the record
-- keeps them, then for each refused key with a retry time its index and
-- the time (a flood of granted keys adds nothing per key).
local out = { 0, cur, (cur + 1) * slice_us - now_us, t[1], t[2], '' }
local nout = 6
local grants = {}
local field = string.format('%d', cur)
-- The expiry of every key written, formatted once.
local expire = string.format('%d', (cur + J) * slice_ms)
local asks = ARGV[8]
for i = 1, m do
  local k = KEYS[2 + i]
  local need, want = unpack_asks('<dd', asks, 16 * i - 15)
  local granted = 0
  -- Refused: server microseconds until enough of the window's oldest
  -- slices leave it for the lease to fit (-1: not refused).
  local retry = -1
  local h = call('HGETALL', k)
  local n = #h
  -- The window's permits, and whether the key has a field of this slice
  -- (then its expiry is this slice's already). A key new to the window
  -- (most of a flood) has no fields; a warm key asking again in the same
  -- slice has that one field: neither builds a table.
  local sum, here = 0, false
  if n == 2 and h[1] == field then
    sum, here = tonumber(h[2]), true
  elseif n > 0 then
    local old = {}
    for j = 1, n, 2 do
      local f = h[j]
      if f == field then
        here = true
        sum = sum + tonumber(h[j + 1])
      elseif tonumber(f) <= floor then
        old[#old + 1] = f
      else
        sum = sum + tonumber(h[j + 1])
      end
    end
    if #old > 0 then call('HDEL', k, unpack(old)) end
  end
  local room = limit - sum
  if room >= need then
    -- At least what the node needs; beyond it, what it wants but at most
    -- half the room left, so that near the limit batches shrink (down to
    -- 1) and no node sits on the last permits.
    -- min(room, max(need, min(want, ceil(room / 2)))), room an integer.
    granted = (room + room % 2) / 2
    if want < granted then granted = want end
    if granted < need then granted = need end
    if room < granted then granted = room end
    call('HINCRBY', k, field, fmt('%d', granted))
    -- Expires when its newest slice (this one) leaves the window.
    if not here then call('PEXPIREAT', k, expire) end
  elseif need <= limit then
    -- The live slices, oldest first.
    local live = {}
    for j = 1, n, 2 do
      local e = tonumber(h[j])
      if e > floor then live[#live + 1] = { e, tonumber(h[j + 1]) } end
    end
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
  grants[i] = granted
  if retry >= 0 then
    out[nout + 1] = i
    out[nout + 2] = retry
    nout = nout + 2
  end
end
local r = struct.pack('<dd', seq, cur)
for i = 1, m, 64 do
  local n = math.min(64, m - i + 1)
  r = r .. struct.pack('<' .. string.rep('d', n), unpack(grants, i, i + n - 1))
end
redis.call('SET', KEYS[1], r, 'PX', ARGV[5])
redis.call('SET', KEYS[2], ARGV[6], 'PX', ARGV[5])
out[6] = string.sub(r, 17)
return out
