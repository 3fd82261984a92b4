#!lua
-- stripecount-redis: apply one node's batch of per-slice deltas, exactly once.
-- The protocol is described in src/script.rs; the stored value in src/ring.rs.
--
-- KEYS: 1 node record, 2 namespace config, 3 hot set (score: until epoch),
--       4 hot changes (score: change version), 5 hot version, 6.. data keys.
-- ARGV: 1 batch sequence, 2 slices, 3 slice ms, 4 hot threshold (0: off),
--       5 record ttl ms, 6 deltas, 7 config string, 8 data key prefix length.
local seq = tonumber(ARGV[1])
local S = tonumber(ARGV[2])
local slice_ms = tonumber(ARGV[3])
local thr = tonumber(ARGV[4])
local ttl = tonumber(ARGV[5])
local blob = ARGV[6]
local plen = tonumber(ARGV[8])
local n = #KEYS - 5

-- Every check before the first write: a script that fails after a write
-- keeps that write.
local cfg = redis.call('GET', KEYS[2])
if cfg and cfg ~= ARGV[7] then
  return redis.error_reply('SCFG the namespace is configured as ' .. cfg .. ', this node as ' .. ARGV[7])
end
local offs = {}
local pos = 1
for i = 1, n do
  if pos + 7 > #blob then return redis.error_reply('SBLOB short deltas') end
  local m = struct.unpack('<d', blob, pos)
  if m < 1 or m > 2 * S or m % 1 ~= 0 then return redis.error_reply('SBLOB bad delta count') end
  offs[i] = pos
  pos = pos + 8 + 16 * m
end
if pos ~= #blob + 1 then return redis.error_reply('SBLOB bad length') end
-- The node's record: the last batch applied, the counts it dropped as too
-- old and the crossings it reported.
local rec = redis.call('GET', KEYS[1])
local last = -1
if rec then last = struct.unpack('<d', rec) end
if seq < last then
  return redis.error_reply('SSEQ batch ' .. seq .. ' is older than the last applied, ' .. last)
end
-- The batch was applied and its reply lost: answer again, change nothing.
local replay = seq == last

local t = redis.call('TIME')
local now_ms = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local cur = (now_ms - now_ms % slice_ms) / slice_ms
local floor = cur - S

local fmts = {}
local function fmt(m)
  local f = fmts[m]
  if not f then
    f = '<' .. string.rep('d', m)
    fmts[m] = f
  end
  return f
end

local out = {}
local hot = {}
local dropped = 0
local ver = false
for i = 1, n do
  local k = KEYS[5 + i]
  local v = redis.call('GET', k)
  local until_e, es, cs, oldmax = 0, {}, {}, -1
  if v then
    local m0 = (#v - 8) / 16
    local x = { struct.unpack(fmt(1 + 2 * m0), v) }
    until_e = x[1]
    local q = 0
    for j = 1, m0 do
      local e = x[2 * j]
      if e > floor then
        q = q + 1
        es[q] = e
        cs[q] = x[2 * j + 1]
      end
    end
    if m0 > 0 then oldmax = x[2 * m0] end
  end
  if not replay then
    local p = offs[i]
    local m = struct.unpack('<d', blob, p)
    local d = { struct.unpack(fmt(2 * m), blob, p + 8) }
    for j = 1, m do
      local e, c = d[2 * j - 1], d[2 * j]
      if e > cur then e = cur end -- the server's time is the timeline
      if e <= floor then
        dropped = dropped + c
      else
        local q = #es
        local at = q + 1
        for z = 1, q do
          if es[z] >= e then
            at = z
            break
          end
        end
        if es[at] == e then
          cs[at] = cs[at] + c
        else
          table.insert(es, at, e)
          table.insert(cs, at, c)
        end
      end
    end
    if thr > 0 then
      local sum = 0
      for z = 1, #es do sum = sum + cs[z] end
      if sum >= thr then
        -- The first epoch at which the sum falls below the threshold.
        local rem, u = sum, 0
        for z = 1, #es do
          rem = rem - cs[z]
          if rem < thr then
            u = es[z] + S
            break
          end
        end
        -- Not hot before this batch: this batch made it hot (a crossing).
        if until_e <= cur then hot[#hot + 1] = struct.pack('<dd', i, sum) end
        if u ~= until_e then
          if not ver then ver = redis.call('INCR', KEYS[5]) end
          local member = string.sub(k, plen + 1)
          redis.call('ZADD', KEYS[3], u, member)
          redis.call('ZADD', KEYS[4], ver, member)
          until_e = u
        end
      else
        until_e = 0
      end
    end
  end
  local q = #es
  local parts = { until_e }
  for z = 1, q do
    parts[2 * z] = es[z]
    parts[2 * z + 1] = cs[z]
  end
  local nv = struct.pack(fmt(1 + 2 * q), unpack(parts))
  if not replay then
    if q == 0 then
      if v then redis.call('DEL', k) end
    elseif es[q] == oldmax then
      redis.call('SET', k, nv, 'KEEPTTL')
    else
      -- Expires when its newest slice leaves the window.
      redis.call('SET', k, nv, 'PXAT', (es[q] + S) * slice_ms)
    end
  end
  out[2 * i - 1] = struct.pack('<d', q)
  out[2 * i] = nv
end

local hotblob
if replay then
  dropped = struct.unpack('<d', rec, 9)
  hotblob = string.sub(rec, 17)
else
  hotblob = table.concat(hot)
  redis.call('SET', KEYS[1], struct.pack('<dd', seq, dropped) .. hotblob, 'PX', ttl)
  redis.call('SET', KEYS[2], ARGV[7], 'PX', ttl)
  if thr > 0 then
    local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', cur, 'LIMIT', 0, 256)
    if #gone > 0 then
      redis.call('ZREM', KEYS[3], unpack(gone))
      redis.call('ZREM', KEYS[4], unpack(gone))
    end
    if ver then
      redis.call('PEXPIRE', KEYS[3], ttl)
      redis.call('PEXPIRE', KEYS[4], ttl)
      redis.call('PEXPIRE', KEYS[5], ttl)
    end
  end
end
if not ver then ver = tonumber(redis.call('GET', KEYS[5]) or '0') end
return { replay and 1 or 0, t[1], t[2], dropped, table.concat(out), hotblob, ver }
