-- prelude.lua: the definitions every script of redisq shares; each script is this file followed by
-- its own. KEYS[1] is the shard's meta key "{T}:meta", KEYS[2] its guard key "{T}:guard" (which
-- never exists, so that Redis refuses the script while the shard's slot migrates); every other key
-- of the shard is named here from KEYS[1]. See doc.go for the layout and the record format.
local P = string.sub(KEYS[1], 1, -5)
local META = KEYS[1]
local SECS, LIVE, LEASE, IX = P .. 'secs', P .. 'live', P .. 'lease', P .. 'ix'
local ALIAS, TOPICS, CHAN = P .. 'alias', P .. 'topics', P .. 'ev'
local TC, PAUSED, LAT = P .. 'tc', P .. 'paused', P .. 'lat'
-- A message due within NEAR ms of the script's clock goes straight to its ready set.
local NEAR = 1000
-- MAXMS caps due times: queue.MaxDeliverAt in Unix milliseconds.
local MAXMS = 9214646400000
-- WINDOW (ms) is how long a message acked or cancelled within WINDOW of its due time leaves a
-- tombstone, so that a Put retried after its reply was lost (the engine retries for less than
-- WINDOW) does not store the message again.
local WINDOW = 10000
-- XMAX is the most entries a chunk of a topic's index of scheduled messages holds: Redis keeps a
-- sorted set of up to 128 short members as a listpack, at a third of the memory of a larger one.
local XMAX = 128

-- NOW is the script's clock in Unix milliseconds, rounded down: a message due at d (rounded up
-- when it was put) is due once d <= NOW, so it is never early by this server's clock.
local NOW
do
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function fmt(n) return string.format('%d', n) end
local function wkey(sec) return P .. 'w:' .. sec end
local function rkey(topic) return P .. 'r:' .. topic end
local function lkey(topic) return P .. 'l:' .. topic end
local function dkey(topic) return P .. 'd:' .. topic end
local function xikey(topic) return P .. 'xi:' .. topic end
local function xckey(topic, bound) return P .. 'xc:' .. #topic .. ':' .. topic .. bound end

-- parse decodes a record's header; its payload starts at byte r.body.
local function parse(rec)
  local due, req, att, tok, aux, nonce, fail, dead, olen, tlen, p = string.match(rec,
    '^(%-?%d+),(%-?%d*),(%d+),([^,]*),([^,]*),([^,]*),([^,]*),([^,]*),(%d+),(%d+);()')
  if not due then error('redisq: malformed record') end
  olen, tlen = tonumber(olen), tonumber(tlen)
  return {due = tonumber(due), req = req, att = tonumber(att), tok = tok, aux = aux, nonce = nonce,
    fail = fail, dead = dead, origin = string.sub(rec, p, p + olen - 1),
    topic = string.sub(rec, p + olen, p + olen + tlen - 1), body = p + olen + tlen}
end

local function payload(rec, r) return string.sub(rec, r.body) end

local function encode(r, pl)
  return fmt(r.due) .. ',' .. r.req .. ',' .. fmt(r.att) .. ',' .. r.tok .. ',' .. r.aux .. ','
    .. r.nonce .. ',' .. r.fail .. ',' .. r.dead .. ',' .. fmt(#r.origin) .. ',' .. fmt(#r.topic) .. ';'
    .. r.origin .. r.topic .. pl
end

-- died returns when a dead letter died (ms), from its record's dead field "<ms>.<attempts>".
local function died(r) return tonumber(string.match(r.dead, '^(%d+)')) or NOW end

-- M caches the shard's pointer fields; finish writes them back when dirty.
local M
local function meta()
  if not M then
    local v = redis.call('HMGET', META, 'adv', 'drain', 'cur', 'ver')
    local drain = v[2]
    if drain == '' then drain = false end
    M = {adv = tonumber(v[1]) or 0, drain = drain, cur = v[3] or '0', ver = tonumber(v[4]) or 0}
  end
  return M
end

-- D holds the changes of the shard's counters and TCD those of the per-topic counters in TC (field
-- "<kind><topic>": s scheduled in the wheel, p puts, v deliveries, a acks); EW and EL a second and a
-- lease deadline that this script made the shard's earliest; ER, per topic given a ready message
-- here, its earlier head and the earliest due time added (ERN keeps the topics in order); LN, LS,
-- LB and LMX the lateness observed (count, sum in ms, per bucket, maximum).
local D = {sched = 0, ready = 0, leased = 0}
local TCD = {}
local EW, EL = false, false
local ER, ERN = {}, {}
local LN, LS, LB, LMX = 0, 0, {}, 0

local function tcount(kind, topic, n)
  local f = kind .. topic
  TCD[f] = (TCD[f] or 0) + n
end

-- LATB are the upper bounds (ms) of the lateness buckets b1.. of LAT; bucket b<#LATB+1> is above
-- the last. The engine reads them in the same order (latencyBounds in stats.go).
local LATB = {0, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000}

local function observe_late(l)
  LN = LN + 1
  LS = LS + l
  local k = #LATB + 1
  for i, b in ipairs(LATB) do
    if l <= b then k = i break end
  end
  LB[k] = (LB[k] or 0) + 1
  if l > LMX then LMX = l end
end

-- PAUSEDN tells whether any topic is paused in this shard.
local PAUSEDN
local function paused(topic)
  if PAUSEDN == nil then PAUSEDN = redis.call('EXISTS', PAUSED) == 1 end
  return PAUSEDN and redis.call('SISMEMBER', PAUSED, topic) == 1
end

-- IXN tells whether the index of moved messages has entries, so that the common case (generated
-- IDs in the seconds they name) skips it.
local IXN
local function ix_used()
  if IXN == nil then IXN = redis.call('EXISTS', IX) == 1 end
  return IXN
end

-- bytes_lt compares strings byte by byte, as Redis orders the members of a sorted set (Lua's <
-- follows the server's locale).
local function bytes_lt(a, b)
  if a == b then return false end
  for i = 1, math.min(#a, #b) do
    local x, y = string.byte(a, i), string.byte(b, i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- after returns the rank of the first member of sorted set z that comes after (ms, id) in the set's
-- order (score, then member byte by byte).
local function after(z, ms, id)
  local lo = redis.call('ZCOUNT', z, '-inf', '(' .. ms)
  local hi = redis.call('ZCOUNT', z, '-inf', ms)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    local m = redis.call('ZRANGE', z, mid, mid)[1]
    if bytes_lt(id, m) then hi = mid else lo = mid + 1 end
  end
  return lo
end

-- The index of a topic's scheduled messages in the wheel is a sequence of chunks, sorted sets of
-- message IDs scored by due time, each of at most XMAX entries and covering a range of (due time,
-- ID): xi:<topic> is a sorted set of the chunks' lower bounds, "<due ms, 14 digits><ID>", all of
-- score 0 so that ZRANGEBYLEX finds the chunk of an entry; the first chunk's bound is "", so that
-- every entry has one. A full chunk is split in two halves; an empty one is removed (the first by
-- renaming the second to it), and a small one is merged into the one before when they fit.

local function xbound(ms, id) return string.format('%014d', ms) .. id end

-- xfloor returns the bound of the chunk of topic's index that covers bound b, or nil when the
-- index is empty.
local function xfloor(topic, b)
  return redis.call('ZREVRANGEBYLEX', xikey(topic), '[' .. b, '-', 'LIMIT', 0, 1)[1]
end

-- xmove moves the entries given as {member, score, ...} to chunk k from chunk f (when f is set).
local function xmove(kv, k, f)
  local args, ids = {}, {}
  for i = 1, #kv, 2 do
    args[#args + 1] = kv[i + 1]
    args[#args + 1] = kv[i]
    ids[#ids + 1] = kv[i]
  end
  if #ids == 0 then return end
  redis.call('ZADD', k, unpack(args))
  if f then redis.call('ZREM', f, unpack(ids)) end
end

-- xadd indexes the scheduled message id of topic, due at ms.
local function xadd(topic, ms, id)
  local b = xfloor(topic, xbound(ms, id))
  if not b then
    b = ''
    redis.call('ZADD', xikey(topic), 0, b)
  end
  local k = xckey(topic, b)
  redis.call('ZADD', k, ms, id)
  if redis.call('ZCARD', k) >= XMAX then
    local half = redis.call('ZRANGE', k, XMAX / 2, -1, 'WITHSCORES')
    local nb = xbound(tonumber(half[2]), half[1])
    xmove(half, xckey(topic, nb), k)
    redis.call('ZADD', xikey(topic), 0, nb)
  end
  tcount('s', topic, 1)
end

-- xdel removes the scheduled message id of topic, due at ms, from the index.
local function xdel(topic, ms, id)
  local b = xfloor(topic, xbound(ms, id))
  if not b then return end
  local k = xckey(topic, b)
  if redis.call('ZREM', k, id) == 0 then return end
  tcount('s', topic, -1)
  local n = redis.call('ZCARD', k)
  local xi = xikey(topic)
  if n == 0 then
    if b ~= '' then
      redis.call('ZREM', xi, b)
    else
      local nb = redis.call('ZRANGE', xi, 1, 1)[1]
      if nb then
        redis.call('RENAME', xckey(topic, nb), k)
        redis.call('ZREM', xi, nb)
      else
        redis.call('DEL', xi)
      end
    end
  elseif b ~= '' and n < XMAX / 8 then
    local pb = redis.call('ZREVRANGEBYLEX', xi, '(' .. b, '-', 'LIMIT', 0, 1)[1]
    local pk = xckey(topic, pb)
    if redis.call('ZCARD', pk) + n <= XMAX * 3 / 4 then
      xmove(redis.call('ZRANGE', k, 0, -1, 'WITHSCORES'), pk, false)
      redis.call('DEL', k)
      redis.call('ZREM', xi, b)
    end
  end
end

-- locate finds the message id: it returns true and its record if it is due or leased, the second
-- and its record if it waits in the wheel, or false. hint is the second its ID names, or ''.
local function locate(id, hint)
  local rec = redis.call('HGET', LIVE, id)
  if rec then return true, rec end
  local sec = false
  if ix_used() then sec = redis.call('HGET', IX, id) end
  if not sec then
    if hint == '' then return false end
    sec = hint
  end
  rec = redis.call('HGET', wkey(sec), id)
  if rec then return sec, rec end
  return false
end

-- to_ready makes a message due at due (maybe a little ahead) in its topic's ready set.
local function to_ready(id, rec, topic, due)
  local t = ER[topic]
  if not t then
    local h = redis.call('ZRANGE', rkey(topic), 0, 0, 'WITHSCORES')
    if h[1] then
      t = {old = tonumber(h[2]), min = due}
    else
      t = {old = false, min = due}
      redis.call('SADD', TOPICS, topic)
    end
    ER[topic] = t
    ERN[#ERN + 1] = topic
  elseif due < t.min then
    t.min = due
  end
  redis.call('HSET', LIVE, id, rec)
  redis.call('ZADD', rkey(topic), due, id)
  D.ready = D.ready + 1
  observe_late(math.max(NOW - due, 0))
end

-- to_wheel puts a message of topic due at due in the hash of its second (a decimal string) and in
-- the topic's index; index records the second in IX, for a message whose ID does not name it.
local function to_wheel(id, rec, topic, due, sec, index)
  local k = wkey(sec)
  redis.call('HSET', k, id, rec)
  if index then
    redis.call('HSET', IX, id, sec)
    IXN = true
  end
  D.sched = D.sched + 1
  xadd(topic, due, id)
  if redis.call('HLEN', k) == 1 then
    redis.call('ZADD', SECS, sec, sec)
    local n = tonumber(sec)
    if not EW or n < EW then
      local first = redis.call('ZRANGE', SECS, 0, 0)
      if first[1] == sec then EW = n end
    end
  end
end

-- place puts a message whose record r changed where its due time says: its ready set if it is due
-- soon or its second was promoted already, its second otherwise. fromlive says it is in LIVE now.
local function place(id, r, pl, fromlive)
  local rec = encode(r, pl)
  local sec = math.floor(r.due / 1000)
  if r.due <= NOW + NEAR or sec < meta().adv then
    to_ready(id, rec, r.topic, r.due)
  else
    if fromlive then redis.call('HDEL', LIVE, id) end
    to_wheel(id, rec, r.topic, r.due, fmt(sec), true)
  end
end

-- unlease ends the lease of a message of topic; it reports whether it was leased.
local function unlease(id, topic)
  if redis.call('ZREM', LEASE, id) == 0 then return false end
  redis.call('ZREM', lkey(topic), id)
  D.leased = D.leased - 1
  return true
end

-- remove deletes a message found by locate (where) with record r.
local function remove(id, where, r)
  if where == true then
    redis.call('HDEL', LIVE, id)
    if not unlease(id, r.topic) and redis.call('ZREM', rkey(r.topic), id) == 1 then
      D.ready = D.ready - 1
      if redis.call('EXISTS', rkey(r.topic)) == 0 then redis.call('SREM', TOPICS, r.topic) end
    end
  else
    local k = wkey(where)
    redis.call('HDEL', k, id)
    if redis.call('EXISTS', k) == 0 then redis.call('ZREM', SECS, where) end
    if ix_used() then redis.call('HDEL', IX, id) end
    D.sched = D.sched - 1
    xdel(r.topic, r.due, id)
  end
  if r.origin ~= '' then redis.call('ZREM', dkey(r.origin), id) end
end

-- bury leaves the tombstone of a message just acked or cancelled, if a retry of its Put may still
-- come: it was put due within WINDOW (its nonce field starts with 'y'; a retry of the Put of a
-- message due later comes before it is due, and finds it waiting) and it was due within WINDOW.
-- The tombstone is a member "<nonce>|<id>" of the set of this second, which expires after WINDOW.
local function bury(id, r)
  if string.sub(r.nonce, 1, 1) ~= 'y' or NOW - r.due > WINDOW then return end
  local k = P .. 'done:' .. fmt(math.floor(NOW / 1000))
  if redis.call('SADD', k, string.sub(r.nonce, 2) .. '|' .. id) == 1 and redis.call('SCARD', k) == 1 then
    redis.call('EXPIRE', k, WINDOW / 1000 + 2)
  end
end

-- buried reports whether the message put as (id, nonce) left a tombstone in the last WINDOW.
local function buried(id, nonce)
  local m = nonce .. '|' .. id
  for s = math.floor(NOW / 1000), math.floor((NOW - WINDOW) / 1000), -1 do
    if redis.call('SISMEMBER', P .. 'done:' .. fmt(s), m) == 1 then return true end
  end
  return false
end

-- CFG is the caller's delivery configuration, for the scripts that fail deliveries: ARGV[i..i+3]
-- are the maximum attempts (0: no limit), the first and the longest backoff in ms, and the
-- dead-letter topic ('' for the topic's name followed by '.dead').
local CFG
local function load_cfg(i)
  CFG = {maxatt = tonumber(ARGV[i]), first = tonumber(ARGV[i + 1]), max = tonumber(ARGV[i + 2]),
    dlq = ARGV[i + 3]}
end

local function is_dead_topic(t)
  if CFG.dlq ~= '' then return t == CFG.dlq end
  return #t >= 5 and string.sub(t, -5) == '.dead'
end

local function dead_topic(t)
  if CFG.dlq ~= '' then return CFG.dlq end
  return t .. '.dead'
end

local function backoff(att)
  local d = CFG.first
  for _ = 2, att do
    if d >= CFG.max then break end
    d = d * 2
  end
  if d > CFG.max then d = CFG.max end
  return d
end

-- fail records a failed delivery of a message in LIVE, no longer leased, and why ('n' nacked, 'x'
-- lease expired): it is due again after delay (or the backoff when delay is nil), or moves to its
-- dead-letter topic, keeping the topic it died on, when and after how many attempts. A dead letter
-- that fails on the dead-letter topic is a dead letter again (it was not one while leased).
local function fail(id, r, pl, delay, why)
  if r.req == '' then r.req = fmt(r.due) end
  r.fail = why .. fmt(NOW)
  local dead = CFG.maxatt > 0 and r.att >= CFG.maxatt
  local due
  if dead and not is_dead_topic(r.topic) then
    r.origin, r.dead = r.topic, fmt(NOW) .. '.' .. fmt(r.att)
    r.topic = dead_topic(r.topic)
    r.att = 0
    due = NOW
  elseif dead then
    due = NOW + CFG.max
  elseif delay then
    due = NOW + delay
  else
    due = NOW + backoff(r.att)
  end
  if due > MAXMS then due = MAXMS end
  r.due = due
  if r.origin ~= '' then redis.call('ZADD', dkey(r.origin), died(r), id) end
  place(id, r, pl, true)
end

-- promote moves to the ready sets the seconds that start within lead ms of NOW, at most about
-- budget messages; it returns how many it moved.
local function promote(lead, budget)
  local m = meta()
  local limit = math.floor((NOW + lead) / 1000)
  local moved = 0
  local touched = false
  while budget > 0 do
    if not m.drain then
      local first = redis.call('ZRANGE', SECS, 0, 0)
      if not first[1] or tonumber(first[1]) > limit then break end
      m.drain, m.cur = first[1], '0'
      touched = true
    end
    local k = wkey(m.drain)
    local res = redis.call('HSCAN', k, m.cur, 'COUNT', math.min(budget, 500))
    m.cur = res[1]
    touched = true
    local kv = res[2]
    local ids = {}
    for i = 1, #kv, 2 do
      local id, rec = kv[i], kv[i + 1]
      local r = parse(rec)
      xdel(r.topic, r.due, id)
      to_ready(id, rec, r.topic, r.due)
      ids[#ids + 1] = id
    end
    if #ids > 0 then
      redis.call('HDEL', k, unpack(ids))
      if ix_used() then redis.call('HDEL', IX, unpack(ids)) end
      D.sched = D.sched - #ids
      moved = moved + #ids
      budget = budget - #ids
    end
    if m.cur == '0' then
      if redis.call('EXISTS', k) == 0 then
        redis.call('ZREM', SECS, m.drain)
        m.drain = false
      end
    end
  end
  if limit + 1 > m.adv then
    m.adv = limit + 1
    touched = true
  end
  if touched then m.dirty = true end
  return moved
end

-- expire fails the leases whose deadline has passed, at most budget of them; it returns how many.
local function expire(budget)
  local ids = redis.call('ZRANGEBYSCORE', LEASE, '-inf', NOW, 'LIMIT', 0, budget)
  if #ids == 0 then return 0 end
  redis.call('ZREM', LEASE, unpack(ids))
  D.leased = D.leased - #ids
  for _, id in ipairs(ids) do
    local rec = redis.call('HGET', LIVE, id)
    if rec then
      local r = parse(rec)
      redis.call('ZREM', lkey(r.topic), id)
      fail(id, r, payload(rec, r), nil, 'x')
    end
  end
  return #ids
end

-- next_events returns the shard's earliest second with waiting messages (-1: none) and its count,
-- and its earliest lease deadline (-1: none).
local function next_events()
  local wsec, wcount, lms = -1, 0, -1
  local first = redis.call('ZRANGE', SECS, 0, 0)
  if first[1] then
    wsec = tonumber(first[1])
    wcount = redis.call('HLEN', wkey(first[1]))
  end
  local l = redis.call('ZRANGE', LEASE, 0, 0, 'WITHSCORES')
  if l[1] then lms = tonumber(l[2]) end
  return wsec, wcount, lms
end

local function opt(n)
  if n then return fmt(n) end
  return '-'
end

-- finish writes the pointer and the counters back and publishes the script's event, if any: kind
-- 'm' when a time was made earlier, or kind 'n' (always) with the shard's next times after a tick.
-- The heads of paused topics are left out: their receivers have nothing to wait for. It returns
-- the shard's event count.
local function finish(kind, owner, wsec, wcount, lms)
  local m = meta()
  if m.dirty then
    redis.call('HSET', META, 'adv', fmt(m.adv), 'drain', m.drain or '', 'cur', m.cur)
  end
  for k, v in pairs(D) do
    if v ~= 0 then redis.call('HINCRBY', META, k, v) end
  end
  for f, v in pairs(TCD) do
    if v ~= 0 and redis.call('HINCRBY', TC, f, v) == 0 and string.sub(f, 1, 1) == 's' then
      redis.call('HDEL', TC, f)
    end
  end
  if LN > 0 then
    redis.call('HINCRBY', LAT, 'n', LN)
    if LS > 0 then redis.call('HINCRBY', LAT, 'sum', LS) end
    for k, v in pairs(LB) do redis.call('HINCRBY', LAT, 'b' .. k, v) end
    if LMX > 0 and LMX > (tonumber(redis.call('HGET', LAT, 'max')) or 0) then
      redis.call('HSET', LAT, 'max', LMX)
    end
  end
  local heads = {}
  for _, topic in ipairs(ERN) do
    local t = ER[topic]
    if (not t.old or t.min < t.old) and not paused(topic) then
      heads[#heads + 1] = fmt(t.min) .. ' ' .. #topic .. ':' .. topic
    end
  end
  local msg
  if kind == 'n' then
    local w = '-'
    if wsec >= 0 then w = fmt(wsec) end
    local l = '-'
    if lms >= 0 then l = fmt(lms) end
    msg = ' ' .. w .. ' ' .. fmt(wcount) .. ' ' .. l .. ' ' .. owner
  elseif EW or EL or #heads > 0 then
    msg = ' ' .. opt(EW) .. ' - ' .. opt(EL) .. ' -'
  else
    return m.ver
  end
  local ver = redis.call('HINCRBY', META, 'ver', 1)
  if #heads > 0 then msg = msg .. ' ' .. table.concat(heads, ' ') end
  redis.call('SPUBLISH', CHAN, kind .. ' ' .. ver .. msg)
  return ver
end
