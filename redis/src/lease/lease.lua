#!lua
-- stripecount-redis: return a node's unused permits and lease a batch of
-- permits of each of several keys, on server time, exactly once. The
-- protocol is described in src/lease/script.rs, the layout of the counts in
-- src/lease/layout.rs, the invariant it keeps in src/lease/mod.rs.
--
-- KEYS: 1 node record, 2 namespace config, 3 the slots' generations, then
--       the R = 4 buckets, slot 0 first.
-- ARGV: 1 sequence, 2 J: the slices a request is judged against (the
--       quota's slices, one more when it is strict), 3 slice ms, 4 limit,
--       5 record ttl ms, 6 config string, 7 m, 8 per leased key its need
--       (at least this many, or none) and want, as little-endian doubles
--       (16 bytes a key: read without a strtod each), then the m leased
--       keys' fields (each once), then per returned key: its field, its
--       slice (epoch) and the permits returned.
-- "The window" below is the last J slices: a lease fits if the window's
-- permits plus its need are at most the limit.
-- A key's counts: its ring, the value of its field in one bucket, pairs
-- of little-endian doubles (slice, permits leased in it less those
-- returned), one pair a slice with permits.
-- Costs, counted by callgrind on redis-server 7.0 (instructions): a
-- redis.call about 3,000 before its command's own work; a tonumber of a
-- string (strtod) about 2,000; a Lua number given to redis.call is
-- formatted with a floating-point printf. So a batch's rings are read
-- with one HMGET a live slot and written with one HSET, numbers that Redis
-- reads go as strings (the record's lifetime as its argument, the expiry
-- formatted with %d), needs and wants are unpacked from doubles, and the
-- loop over the keys calls no library function it can do without.
local call, unpackd, pack = redis.call, struct.unpack, struct.pack
local R = 4
local seq = tonumber(ARGV[1])
local J = tonumber(ARGV[2])
local slice_ms = tonumber(ARGV[3])
local limit = tonumber(ARGV[4])
local ttl = tonumber(ARGV[5])
local m = tonumber(ARGV[7])
local nret = -1
if m then nret = (#ARGV - 8 - m) / 3 end

-- Every check before the first write.
if not (seq and J and slice_ms and limit and ttl and m) or m < 0 or J < 1
    or nret < 0 or nret % 1 ~= 0 or #KEYS ~= 3 + R or #ARGV[8] ~= 16 * m then
  return redis.error_reply('SARGS bad arguments: a count or setting is missing or not a number')
end
local cfg = call('GET', KEYS[2])
if cfg and cfg ~= ARGV[6] then
  return redis.error_reply('SCFG the namespace is configured as ' .. cfg .. ', this node as ' .. ARGV[6])
end
-- The record: the last applied sequence, its slice, then what each of its
-- leases granted (doubles).
local rec = call('GET', KEYS[1])
local last, le = -1, 0
if rec then last, le = unpackd('<dd', rec) end
if seq < last then
  return redis.error_reply('SSEQ request ' .. seq .. ' is older than the last applied, ' .. last)
end

local t = call('TIME')
local now_us = tonumber(t[1]) * 1000000 + tonumber(t[2])
local slice_us = slice_ms * 1000
local cur = (now_us - now_us % slice_us) / slice_us

-- Applied before and its reply lost: answer again (the leases' slice and
-- what each granted, with the time left in that slice now), change
-- nothing but the record's expiry: rewriting it makes a WAIT after this
-- reply cover the request's first application (a replica's data is a
-- prefix of its master's writes), even on another connection.
if seq == last then
  call('SET', KEYS[1], rec, 'PX', ARGV[5])
  return { 1, le, (le + 1) * slice_us - now_us, t[1], t[2], string.sub(rec, 17) }
end

local floor = cur - J
-- Generations of G slices, half the window rounded up (layout.rs).
local G = (J + J % 2) / 2
local gcur = (cur - cur % G) / G
-- The oldest generation that may hold a slice of the window.
local glive = (floor + 1 - (floor + 1) % G) / G
-- A bucket of generation g expires a generation after the newest slice g
-- can hold left the window (formatted where it is set): before then a
-- request deletes it, and expiry is left for namespaces no node leases
-- from any more.

-- The generation each slot holds (-1: none); those that left the window
-- are deleted (UNLINK: a big hash is freed off Redis's main thread).
local gens = { -1, -1, -1, -1 }
local gens_changed = false
do
  local gm = call('GET', KEYS[3])
  if gm and #gm == 8 * R then gens = { unpackd('<dddd', gm) } gens[R + 1] = nil end
  for r = 0, R - 1 do
    local h = gens[r + 1]
    if h >= 0 and h < glive then
      call('UNLINK', KEYS[4 + r])
      gens[r + 1] = -1
      gens_changed = true
    end
  end
end
-- A ring of generation g goes to slot g % R. That slot holds no
-- generation (its bucket was deleted, or never written), g, or a later
-- one (only when this server's clock is behind the one that wrote it: a
-- live generation older than g and in g's slot would be 4 generations
-- older, beyond the window). A slot's generation only rises: its first
-- write gives it the ring's, a later ring's raises it (below), so a
-- bucket lives as long as the newest ring it holds. `here`: this slice's
-- slot.
local here = gcur % R

-- Each key's ring as a list of live pairs {slice, permits, ...}, and the
-- slot it was read from (a key has at most one ring among the live slots:
-- a ring is deleted from a slot when it moves to another). Built only for
-- keys that have one: a request of keys new to the window (most of a
-- flood) allocates nothing a key but its packed ring.
local ring, from
local rb = 8 + m
local rfields
if nret > 0 then
  rfields = {}
  for j = 1, nret do rfields[j] = ARGV[rb + 3 * j - 2] end
end
-- Lua passes at most a few thousand values to a call: fields go in chunks.
local CHUNK = 1000
local function found(r, v, f)
  if not ring then ring, from = {}, {} end
  if from[f] then return end
  from[f] = r
  local p, np = {}, 0
  for j = 1, #v, 16 do
    local e, n = unpackd('<dd', v, j)
    if e > floor then
      p[np + 1] = e
      p[np + 2] = n
      np = np + 2
    end
  end
  ring[f] = p
end
-- Every slot left holds a generation that may hold a slice of the window,
-- or one ahead of this server's clock (a server whose clock stepped back,
-- or a replica promoted with a clock behind its master's): its rings count
-- as they did when they were written.
for r = 0, R - 1 do
  if gens[r + 1] >= 0 then
    for c0 = 1, m, CHUNK do
      local c1 = math.min(m, c0 + CHUNK - 1)
      local vals = call('HMGET', KEYS[4 + r], unpack(ARGV, 8 + c0, 8 + c1))
      for i = c0, c1 do
        local v = vals[i - c0 + 1]
        if v then found(r, v, ARGV[8 + i]) end
      end
    end
    for c0 = 1, nret, CHUNK do
      local c1 = math.min(nret, c0 + CHUNK - 1)
      local vals = call('HMGET', KEYS[4 + r], unpack(rfields, c0, c1))
      for i = c0, c1 do
        local v = vals[i - c0 + 1]
        if v then found(r, v, rfields[i]) end
      end
    end
  end
end

-- The writes, gathered: per slot the fields and rings to set (this
-- slice's slot's in `hs`), per slot the fields to delete, and the newest
-- generation of the rings each slot is given. The tables of keys that had
-- a ring are made when the first is touched.
local hs, ns = nil, 0
local sets, dels, target, dirty, touched, nd
-- The slot ring p goes to (that of its newest slice's generation; -1 for
-- an empty ring, deleted).
local function slot_for(p)
  local e = -1
  for j = 1, #p, 2 do
    if p[j] > e then e = p[j] end
  end
  if e < 0 then return -1 end
  local g = (e - e % G) / G
  local r = g % R
  if not target then target = {} end
  if not target[r] or target[r] < g then target[r] = g end
  return r
end
-- Marks field f's ring to be written.
local function touch(f)
  if not dirty then dirty, touched, nd = {}, {}, 0 end
  if not touched[f] then
    touched[f] = true
    nd = nd + 1
    dirty[nd] = f
  end
end

-- Returns only lower a live slice's count, never below 0; a slice that
-- left the window is gone already.
for j = 1, nret do
  local f = rfields[j]
  local e = tonumber(ARGV[rb + 3 * j - 1])
  local n = tonumber(ARGV[rb + 3 * j])
  local p = ring and ring[f]
  if e and n and e > floor and n > 0 and p then
    for x = 1, #p, 2 do
      if p[x] == e then
        local q = {}
        for y = 1, #p do q[y] = p[y] end
        if q[x + 1] > n then
          q[x + 1] = q[x + 1] - n
        else
          table.remove(q, x + 1)
          table.remove(q, x)
        end
        ring[f] = q
        touch(f)
        break
      end
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
local asks = ARGV[8]
for i = 1, m do
  local f = ARGV[8 + i]
  local need, want = unpackd('<dd', asks, 16 * i - 15)
  local granted = 0
  -- Refused: server microseconds until enough of the window's oldest
  -- slices leave it for the lease to fit (-1: not refused).
  local retry = -1
  local p = ring and ring[f]
  -- A key new to the window (most keys of a flood) has no ring: nothing
  -- to sum, and its ring is this lease alone, packed as it is granted.
  local sum, at = 0, nil
  if p then
    for x = 1, #p, 2 do
      sum = sum + p[x + 1]
      if p[x] == cur then at = x end
    end
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
    if granted > 0 then
      if not p then
        if not hs then hs = {} end
        hs[ns + 1] = f
        hs[ns + 2] = pack('<dd', cur, granted)
        ns = ns + 2
      else
        if at then
          p[at + 1] = p[at + 1] + granted
        else
          p[#p + 1] = cur
          p[#p + 1] = granted
        end
        touch(f)
      end
    end
  elseif p and need <= limit then
    -- The live slices, oldest first. (A need above the limit never fits:
    -- no retry time.)
    local live = {}
    for x = 1, #p, 2 do live[#live + 1] = { p[x], p[x + 1] } end
    table.sort(live, function(a, b) return a[1] < b[1] end)
    local left = sum
    for _, s in ipairs(live) do
      left = left - s[2]
      if limit - left >= need then
        retry = (s[1] + J) * slice_us - now_us
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

-- The touched rings: each in the slot of its newest slice's generation,
-- deleted from the slot it moved from, or deleted when it holds nothing.
-- Packed 64 doubles at a time (a ring may hold 4,096 slices: more values
-- than one unpack can pass).
for d = 1, nd or 0 do
  local f = dirty[d]
  local p = ring[f]
  local np = #p
  local r
  if np == 2 and p[1] == cur then
    -- The common case: one slice, this one.
    r = here
  else
    r = slot_for(p)
  end
  if r >= 0 then
    local v
    if np == 2 then
      v = pack('<dd', p[1], p[2])
    elseif np == 4 then
      v = pack('<dddd', p[1], p[2], p[3], p[4])
    else
      v = ''
      for c0 = 1, np, 64 do
        local c1 = math.min(np, c0 + 63)
        v = v .. pack('<' .. string.rep('d', c1 - c0 + 1), unpack(p, c0, c1))
      end
    end
    local l
    if r == here then
      if not hs then hs = {} end
      l = hs
    else
      if not sets then sets = {} end
      l = sets[r]
      if not l then
        l = {}
        sets[r] = l
      end
    end
    l[#l + 1] = f
    l[#l + 1] = v
  end
  local was = from[f]
  if was and was ~= r then
    if not dels then dels = {} end
    local l = dels[was]
    if not l then
      l = {}
      dels[was] = l
    end
    l[#l + 1] = f
  end
end
local function chunked(cmd, k, l)
  for c0 = 1, #l, 2 * CHUNK do
    call(cmd, k, unpack(l, c0, math.min(#l, c0 + 2 * CHUNK - 1)))
  end
end
if dels then
  for r, l in pairs(dels) do chunked('HDEL', KEYS[4 + r], l) end
end
-- Writes slot r's list l, rings of generations up to g. The slot's first
-- write gives the bucket its marker, which makes it a hash table (a value
-- longer than hash-max-listpack-value), and gives the slot g and the
-- bucket g's expiry; a ring of a later generation than the slot's raises
-- both.
local function write(r, g, l)
  local h = gens[r + 1]
  if h < 0 then
    l[#l + 1] = '\255'
    l[#l + 1] = '------------------------------------------------------------------------'
  end
  chunked('HSET', KEYS[4 + r], l)
  if h < g then
    gens[r + 1] = g
    gens_changed = true
    call('PEXPIREAT', KEYS[4 + r], string.format('%d', ((g + 2) * G - 1 + J) * slice_ms))
  end
end
if hs then
  local g = gcur
  if target and target[here] and target[here] > g then g = target[here] end
  write(here, g, hs)
end
if sets then
  for r, l in pairs(sets) do write(r, target[r], l) end
end
-- The config lasts as long as the newest bucket, so that no count outlives
-- the check that every node shares the quota: it is written with the
-- slots' generations (once a generation), or when it is missing.
local cfg_set = false
if gens_changed then
  -- The slots' generations last as long as the newest bucket.
  local newest = -1
  for r = 1, R do
    if gens[r] > newest then newest = gens[r] end
  end
  if newest < 0 then
    call('DEL', KEYS[3])
  else
    local at = string.format('%d', ((newest + 2) * G - 1 + J) * slice_ms)
    call('SET', KEYS[3], pack('<dddd', unpack(gens)), 'PXAT', at)
    call('SET', KEYS[2], ARGV[6], 'PXAT', at)
    cfg_set = true
  end
end
if not (cfg or cfg_set) then call('SET', KEYS[2], ARGV[6], 'PX', ARGV[5]) end

local r = pack('<dd', seq, cur)
for i = 1, m, 64 do
  local n = math.min(64, m - i + 1)
  r = r .. pack('<' .. string.rep('d', n), unpack(grants, i, i + n - 1))
end
call('SET', KEYS[1], r, 'PX', ARGV[5])
out[6] = string.sub(r, 17)
return out
