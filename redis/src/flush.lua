#!lua
-- stripecount-redis: apply one node's batch of per-slice deltas, exactly once.
-- The protocol is described in src/script.rs, where the rings live in
-- src/bucket.rs, the stored value in src/ring.rs.
--
-- KEYS: 1 node record, 2 namespace config, 3 hot set (score: until epoch),
--       4 hot changes (score: change version), 5 hot version, 6 the
--       generation each of the R = 4 bucket slots holds, 7.. the buckets:
--       slot r's sub-bucket m is KEYS[7 + r * M + m].
-- ARGV: 1 batch sequence, 2 slices, 3 slice ms, 4 hot threshold (0: off),
--       5 record ttl ms, 6 deltas, 7 config string, 8 how many keys each
--       sub-bucket has in the batch (M doubles), 9.. the keys' names, by
--       sub-bucket (the batch order).
-- Replies { replayed, time s, time us, dropped, rings, crossings, hot
-- version, the record's sequence before this call }.
local R = 4
local seq = tonumber(ARGV[1])
local S = tonumber(ARGV[2])
local slice_ms = tonumber(ARGV[3])
local thr = tonumber(ARGV[4])
local ttl = tonumber(ARGV[5])
local blob = ARGV[6]
local M = #ARGV[8] / 8
local n = #ARGV - 8
-- Generations of G slices: a ring lives in the bucket slot of the
-- generation of its newest slice (src/bucket.rs).
local G = math.ceil(S / 2)

-- Every check before the first write: a script that fails after a write
-- keeps that write.
local cfg = redis.call('GET', KEYS[2])
if cfg and cfg ~= ARGV[7] then
  return redis.error_reply('SCFG the namespace is configured as ' .. cfg .. ', this node as ' .. ARGV[7])
end
if M < 1 or M % 1 ~= 0 or #KEYS ~= 6 + R * M then
  return redis.error_reply('SBLOB bad buckets')
end
local counts = { struct.unpack('<' .. string.rep('d', M), ARGV[8]) }
do
  local total = 0
  for m = 1, M do
    local c = counts[m]
    if c < 0 or c % 1 ~= 0 then return redis.error_reply('SBLOB bad bucket count') end
    total = total + c
  end
  if total ~= n then return redis.error_reply('SBLOB bad bucket counts') end
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
local gcur = (cur - cur % G) / G
-- The oldest generation that may hold a slice of the window.
local glive = (floor + 1 - (floor + 1) % G) / G

-- The generation each slot holds (-1: none).
local gens = { -1, -1, -1, -1 }
do
  local gm = redis.call('GET', KEYS[6])
  if gm and #gm == 8 * R then gens = { struct.unpack('<dddd', gm) } gens[R + 1] = nil end
end
-- The slots that may hold a key's ring: those of a live generation (up to
-- one ahead of this server's clock, written by a master whose clock was
-- ahead), the current generation's first. At most one of them holds it.
local look = {}
do
  local rc = gcur % R
  if gens[rc + 1] == gcur then look[1] = rc end
  for g = gcur + 1, glive, -1 do
    local r = g % R
    if g ~= gcur and gens[r + 1] == g then look[#look + 1] = r end
  end
end
-- A bucket of generation g expires a generation after the newest slice g
-- can hold left the window: before then a flush deletes it (`clear`, freed
-- off Redis's main thread), and expiry is left for namespaces no node
-- flushes to any more.
local function expiry(g) return ((g + 2) * G - 1 + S) * slice_ms end
local MARKER, PAD = '\255', string.rep('-', 72)
local gens_changed = false
-- Deletes slot r's buckets and frees the slot.
local function clear(r)
  local ks = {}
  for m = 0, M - 1 do ks[m + 1] = KEYS[7 + r * M + m] end
  redis.call('UNLINK', unpack(ks))
  gens[r + 1] = -1
  gens_changed = true
end
-- Whether generation g can be written in its slot: the slot holds it, or
-- holds none (a generation older than the window is cleared below), and
-- is then given to g. A slot holding a later generation (a server clock
-- that stepped back by more than a window) takes nothing.
local function writable(g)
  local r = g % R
  local h = gens[r + 1]
  if h == g then return true end
  if h >= 0 then return false end
  gens[r + 1] = g
  gens_changed = true
  return true
end
if not replay then
  -- The slots whose generation left the window, cleared.
  for r = 0, R - 1 do
    local h = gens[r + 1]
    if h >= 0 and h < glive then clear(r) end
  end
end

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
-- A ring answered as Redis holds it (none: an empty ring).
local function as_is(v)
  if v then
    out[no + 1] = head((#v - 8) / 16)
    out[no + 2] = v
  else
    out[no + 1] = head(0)
    out[no + 2] = head(0)
  end
  no = no + 2
end
-- Appends `a` (and `b`) to `t[r]`, a list made on first use: a slot's
-- writes or deletions in a bucket. (The steady state below does the same
-- inline.)
local function put(t, r, a, b)
  local l = t[r]
  if not l then
    l = {}
    t[r] = l
  end
  l[#l + 1] = a
  if b then l[#l + 1] = b end
end

-- The steady state: one delta into the newest slice of a ring with no
-- slice to drop and, with hot detection on, of a key that was not hot
-- (its horizon is 0) and stays below the threshold (else the general
-- path decides its horizon and crossing). Only the last count changes:
-- the new value is the old one's head and the new count, written back to
-- the same bucket with the rest of its bucket's writes (one `HSET` a
-- bucket, no command a key). It runs inline in the loop below, with the
-- library functions in locals and a ring of one slice (the most common)
-- read by one `unpack`: a Lua function call a key costs measurably here.
-- `lhead[len]`: the reply's header of a ring of `len` bytes.
local lhead = {}
local unpk, pk, sub, rcall = struct.unpack, struct.pack, string.sub, redis.call
local head1 = head(1)
local steady = not replay

-- A key's ring is handled as one flat table x = { until, e1, c1, ... }
-- with its q slices in increasing epoch order (see src/ring.rs).
local hot = {}
local dropped = 0
local ver = false
local CHUNK = 512
local i0 = 0
for m = 0, M - 1 do
  local cm = counts[m + 1]
  for base = 0, cm - 1, CHUNK do
    local k = math.min(CHUNK, cm - base)
    local a = 8 + i0 + base -- ARGV[a + j] is the chunk's key j
    -- Each key's ring and the slot it is in.
    local vals, where = {}, {}
    local missing = k
    for li = 1, #look do
      local r = look[li]
      local bk = KEYS[7 + r * M + m]
      if missing == k then
        vals = rcall('HMGET', bk, unpack(ARGV, a + 1, a + k))
        missing = 0
        for j = 1, k do
          if vals[j] then where[j] = r else missing = missing + 1 end
        end
      else
        local js, names = {}, {}
        for j = 1, k do
          if not where[j] then
            js[#js + 1] = j
            names[#names + 1] = ARGV[a + j]
          end
        end
        local vs = rcall('HMGET', bk, unpack(names))
        for z = 1, #js do
          if vs[z] then
            vals[js[z]] = vs[z]
            where[js[z]] = r
            missing = missing - 1
          end
        end
      end
      if missing == 0 then break end
    end
    -- sets[r]: the chunk's (name, ring) pairs to write into slot r's
    -- bucket; dels[r]: the names to delete from it (moved or emptied).
    local sets, dels = {}, {}
    for j = 1, k do
      local i = i0 + base + j
      local name = ARGV[a + j]
      local v = vals[j]
      if v == false then v = nil end
      local lv = v and #v or 0
      local done = false
      if steady and lv >= 24 and (uni or ms[i] == 1) then
        local p = uni and 3 * i - 1 or offs[i]
        local e = d[p]
        if e > cur then e = cur end
        local nv
        if lv == 24 then
          local u, oe, oc = unpk('<ddd', v)
          local nc = oc + d[p + 1]
          if oe > floor and e == oe and (thr == 0 or u == 0 and nc < thr) then
            nv = pk('<ddd', u, oe, nc)
            out[no + 1] = head1
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
            nv = sub(v, 1, lv - 8) .. pk('<d', nc + d[p + 1])
            local h = lhead[lv]
            if not h then
              h = head((lv - 8) / 16)
              lhead[lv] = h
            end
            out[no + 1] = h
          end
        end
        if nv then
          local r = where[j]
          local st = sets[r]
          if not st then
            st = {}
            sets[r] = st
          end
          st[#st + 1] = name
          st[#st + 1] = nv
          out[no + 2] = nv
          no = no + 2
          done = true
        end
      end
      if done then
        -- The steady state, done.
      elseif replay then
        -- Answer with the ring as it is (the node ignores stale slices).
        as_is(v)
      else
        local x, q
        if v then
          q = (#v - 8) / 16
          x = { struct.unpack(fmt(1 + 2 * q), v) }
          x[2 + 2 * q] = nil -- unpack's next position
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
          x, q = { 0 }, 0
        end
        local p = uni and 3 * i - 1 or offs[i]
        local added = 0
        for _ = 1, uni and 1 or ms[i] do
          local e, c = d[p], d[p + 1]
          p = p + 2
          if e > cur then e = cur end -- the server's time is the timeline
          if e <= floor then
            dropped = dropped + c
          else
            added = added + c
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
        -- Where the ring goes: the slot of its newest slice's generation.
        local to = false
        if q > 0 then
          local gn = (x[2 * q] - x[2 * q] % G) / G
          if writable(gn) then
            to = gn % R
          end
        end
        if q > 0 and not to then
          -- No slot takes it: the ring stays as it was, the batch's counts
          -- of it are dropped.
          dropped = dropped + added
          as_is(v)
        else
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
                redis.call('ZADD', KEYS[3], u, name)
                redis.call('ZADD', KEYS[4], ver, name)
                x[1] = u
              end
            else
              x[1] = 0
            end
          end
          local nv = struct.pack(fmt(1 + 2 * q), unpack(x, 1, 1 + 2 * q))
          local from = where[j]
          if from and from ~= to then put(dels, from, name) end
          if to then put(sets, to, name, nv) end
          out[no + 1] = head(q)
          out[no + 2] = nv
          no = no + 2
        end
      end
    end
    for r, st in pairs(sets) do
      local bk = KEYS[7 + r * M + m]
      if rcall('HSET', bk, unpack(st)) > 0 then
        -- New fields: the bucket may be new. Its marker makes it a hash
        -- table (src/bucket.rs); its expiry is its generation's.
        rcall('HSET', bk, MARKER, PAD)
        rcall('PEXPIREAT', bk, expiry(gens[r + 1]))
      end
    end
    for r, dl in pairs(dels) do
      rcall('HDEL', KEYS[7 + r * M + m], unpack(dl))
    end
  end
  i0 = i0 + cm
end

if gens_changed then
  -- The slots' generations last as long as the newest bucket.
  local newest = -1
  for r = 1, R do
    if gens[r] > newest then newest = gens[r] end
  end
  if newest < 0 then
    redis.call('DEL', KEYS[6])
  else
    redis.call('SET', KEYS[6], struct.pack('<dddd', unpack(gens)), 'PXAT', expiry(newest))
  end
end

local hotblob
if replay then
  dropped = struct.unpack('<d', rec, 9)
  hotblob = string.sub(rec, 17)
  -- Rewritten, so that a WAIT after the replay covers the batch's first
  -- application.
  redis.call('SET', KEYS[1], rec, 'PX', ttl)
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
return { replay and 1 or 0, t[1], t[2], dropped, table.concat(out), hotblob, ver, last }
