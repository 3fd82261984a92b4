#!lua
-- stripecount-redis: apply one node's batch of per-slice deltas, exactly once.
-- The protocol is described in src/script.rs; the stored value in src/ring.rs.
--
-- KEYS: 1 node record, 2 namespace config, 3 hot set (score: until epoch),
--       4 hot changes (score: change version), 5 hot version, 6.. data keys.
-- ARGV: 1 batch sequence, 2 slices, 3 slice ms, 4 hot threshold (0: off),
--       5 record ttl ms, 6 deltas, 7 config string, 8 data key prefix length,
--       9 (optional, '1') reply with the record's sequence before this call
--       as an 8th element, and rewrite the record on a replay (so that a
--       WAIT after the replay covers the batch's first application).
local seq = tonumber(ARGV[1])
local S = tonumber(ARGV[2])
local slice_ms = tonumber(ARGV[3])
local thr = tonumber(ARGV[4])
local ttl = tonumber(ARGV[5])
local blob = ARGV[6]
local plen = tonumber(ARGV[8])
local v2 = ARGV[9] == '1'
local n = #KEYS - 5

-- Every check before the first write: a script that fails after a write
-- keeps that write.
local cfg = redis.call('GET', KEYS[2])
if cfg and cfg ~= ARGV[7] then
  return redis.error_reply('SCFG the namespace is configured as ' .. cfg .. ', this node as ' .. ARGV[7])
end
-- The deltas, decoded in bulk into one flat table of doubles (a few C
-- calls for the whole batch, not two per key): key i's count of deltas
-- is d[offs[i] - 1], its pairs (epoch, count) follow from d[offs[i]].
local D = #blob / 8
if D % 1 ~= 0 then return redis.error_reply('SBLOB bad length') end
local d
do
  local CH = 4000 -- values a C call may return (the Lua stack holds 8000)
  if D <= CH then
    d = { struct.unpack('<' .. string.rep('d', D), blob) }
  else
    d = {}
    for s = 0, D - 1, CH do
      local k = math.min(CH, D - s)
      local t = { struct.unpack('<' .. string.rep('d', k), blob, 8 * s + 1) }
      for j = 1, k do d[s + j] = t[j] end
    end
  end
end
-- Where each key's deltas are. The steady state, one delta a key, has a
-- uniform layout (D == 3n holds exactly when every count is 1, as each is
-- at least 1): key i's count of deltas is d[3i - 2], its pair d[3i - 1],
-- d[3i], and no tables of offsets are built.
local uni = D == 3 * n
local offs, ms = {}, {}
if uni then
  for i = 1, 3 * n - 2, 3 do
    if d[i] ~= 1 then return redis.error_reply('SBLOB bad delta count') end
  end
else
  local pos = 1
  for i = 1, n do
    if pos > D then return redis.error_reply('SBLOB short deltas') end
    local m = d[pos]
    if m < 1 or m > 2 * S or m % 1 ~= 0 then return redis.error_reply('SBLOB bad delta count') end
    offs[i] = pos + 1
    ms[i] = m
    pos = pos + 1 + 2 * m
  end
  if pos ~= D + 1 then return redis.error_reply('SBLOB bad length') end
end
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
local heads = {}
local function head(q)
  local h = heads[q]
  if not h then
    h = struct.pack('<d', q)
    heads[q] = h
  end
  return h
end

-- The reply's rings, in batch order: each key's pieces are appended at
-- `out[no + 1 ..]` (its ring's header, then its ring in one or more
-- pieces).
local out, no = {}, 0

-- The steady state: one delta into the newest slice of a ring with no
-- slice to drop and, with hot detection on, of a key that was not hot
-- (its horizon is 0) and stays below the threshold (else the general
-- path decides its horizon and crossing). Only the last count changes and
-- the expiry stays: `SETRANGE` writes the new count's 8 bytes in place
-- (in Redis cheaper than a `SET ... KEEPTTL` of the whole value, which
-- makes a new value object and frees the old; the general path below does
-- the same as this, at the price of decoding and re-encoding the whole
-- ring). The key exists: `MGET` read it, and no key expires while a
-- script runs (Redis freezes a script's clock), so `SETRANGE` never makes
-- a key without an expiry. It runs inline in the loop below, with the
-- library functions in locals and a ring of one slice (the most common)
-- read by one `unpack`: a Lua function call a key costs measurably here.
-- `loff[len]`: the offset of the last count of a ring of `len` bytes, as
-- a string (Redis would format a number argument at each call);
-- `lhead[len]`: the reply's header of such a ring.
local lhead, loff = {}, {}
local unpk, pk, sub, rcall = struct.unpack, struct.pack, string.sub, redis.call
local head1 = head(1)
local steady = not replay

-- A key's ring is handled as one flat table x = { until, e1, c1, ... }
-- with its q slices in increasing epoch order (see src/ring.rs).
local hot = {}
local dropped = 0
local ver = false
local CHUNK = 512
for base = 0, n - 1, CHUNK do
  local last_i = math.min(n, base + CHUNK)
  local vals = redis.call('MGET', unpack(KEYS, 6 + base, 5 + last_i))
  for i = base + 1, last_i do
    local k = KEYS[5 + i]
    local v = vals[i - base]
    local lv = v and #v or 0
    local done = false
    if steady and lv >= 24 and (uni or ms[i] == 1) then
      local p = uni and 3 * i - 1 or offs[i]
      local e = d[p]
      if e > cur then e = cur end
      if lv == 24 then
        local u, oe, oc = unpk('<ddd', v)
        local nc = oc + d[p + 1]
        if oe > floor and e == oe and (thr == 0 or u == 0 and nc < thr) then
          local last = pk('<d', nc)
          rcall('SETRANGE', k, '16', last)
          out[no + 1] = head1
          out[no + 2] = sub(v, 1, 16)
          out[no + 3] = last
          no = no + 3
          done = true
        end
      else
        local oe = unpk('<d', v, 9)
        local ne, nc = unpk('<dd', v, lv - 15)
        local ok = oe > floor and e == ne
        if ok and thr > 0 then
          local q = (lv - 8) / 16
          local x = { unpk(fmt(1 + 2 * q), v) }
          local sum = d[p + 1]
          for z = 1, q do sum = sum + x[2 * z + 1] end
          ok = x[1] == 0 and sum < thr
        end
        if ok then
          local off = loff[lv]
          if not off then
            off = tostring(lv - 8)
            loff[lv] = off
            lhead[lv] = head((lv - 8) / 16)
          end
          local last = pk('<d', nc + d[p + 1])
          rcall('SETRANGE', k, off, last)
          out[no + 1] = lhead[lv]
          out[no + 2] = sub(v, 1, lv - 8)
          out[no + 3] = last
          no = no + 3
          done = true
        end
      end
    end
    if done then
      -- The steady state, done.
    elseif replay then
      -- Answer with the ring as it is (the node ignores stale slices).
      if v then
        out[no + 1] = head((#v - 8) / 16)
        out[no + 2] = v
      else
        out[no + 1] = head(0)
        out[no + 2] = head(0)
      end
      no = no + 2
    else
      local x, q, oldmax
      if v then
        q = (#v - 8) / 16
        x = { struct.unpack(fmt(1 + 2 * q), v) }
        x[2 + 2 * q] = nil -- unpack's next position
        oldmax = q > 0 and x[2 * q] or -1
        if q > 0 and x[2] <= floor then
          -- Drop the slices that left the window (at most once a slice).
          local w = 0
          for z = 1, q do
            if x[2 * z] > floor then
              w = w + 1
              x[2 * w] = x[2 * z]
              x[2 * w + 1] = x[2 * z + 1]
            end
          end
          for z = 2 * w + 2, 2 * q + 1 do x[z] = nil end
          q = w
        end
      else
        x, q, oldmax = { 0 }, 0, -1
      end
      local p = uni and 3 * i - 1 or offs[i]
      for _ = 1, uni and 1 or ms[i] do
        local e, c = d[p], d[p + 1]
        p = p + 2
        if e > cur then e = cur end -- the server's time is the timeline
        if e <= floor then
          dropped = dropped + c
        else
          -- Deltas are mostly of the newest slice: search from the end.
          local z = q
          while z >= 1 and x[2 * z] > e do z = z - 1 end
          if z >= 1 and x[2 * z] == e then
            x[2 * z + 1] = x[2 * z + 1] + c
          else
            for w = q, z + 1, -1 do
              x[2 * w + 2] = x[2 * w]
              x[2 * w + 3] = x[2 * w + 1]
            end
            x[2 * z + 2] = e
            x[2 * z + 3] = c
            q = q + 1
          end
        end
      end
      if thr > 0 then
        local until_e = x[1]
        local sum = 0
        for z = 1, q do sum = sum + x[2 * z + 1] end
        if sum >= thr then
          -- The first epoch at which the sum falls below the threshold.
          local rem, u = sum, 0
          for z = 1, q do
            rem = rem - x[2 * z + 1]
            if rem < thr then
              u = x[2 * z] + S
              break
            end
          end
          -- Not hot before this batch: this batch made it hot.
          if until_e <= cur then hot[#hot + 1] = struct.pack('<dd', i, sum) end
          if u ~= until_e then
            if not ver then ver = redis.call('INCR', KEYS[5]) end
            local member = string.sub(k, plen + 1)
            redis.call('ZADD', KEYS[3], u, member)
            redis.call('ZADD', KEYS[4], ver, member)
            x[1] = u
          end
        else
          x[1] = 0
        end
      end
      local nv = struct.pack(fmt(1 + 2 * q), unpack(x, 1, 1 + 2 * q))
      if q == 0 then
        if v then redis.call('DEL', k) end
      elseif x[2 * q] == oldmax then
        redis.call('SET', k, nv, 'KEEPTTL')
      else
        -- Expires when its newest slice leaves the window.
        redis.call('SET', k, nv, 'PXAT', (x[2 * q] + S) * slice_ms)
      end
      out[no + 1] = head(q)
      out[no + 2] = nv
      no = no + 2
    end
  end
end

local hotblob
if replay then
  dropped = struct.unpack('<d', rec, 9)
  hotblob = string.sub(rec, 17)
  if v2 then redis.call('SET', KEYS[1], rec, 'PX', ttl) end
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
if v2 then
  return { replay and 1 or 0, t[1], t[2], dropped, table.concat(out), hotblob, ver, last }
end
return { replay and 1 or 0, t[1], t[2], dropped, table.concat(out), hotblob, ver }
