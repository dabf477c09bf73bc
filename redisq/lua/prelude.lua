-- prelude.lua: the definitions every script of redisq shares; each script is this file followed by
-- its own. KEYS[1] is the shard's meta key "{T}:meta", KEYS[2] its guard key "{T}:guard" (which
-- never exists, so that Redis refuses the script while the shard's slot migrates); every other key
-- of the shard is named here from KEYS[1]. See doc.go for the layout and the record format.
local P = string.sub(KEYS[1], 1, -5)
local META = KEYS[1]
local SECS, LIVE, LEASE, IX = P .. 'secs', P .. 'live', P .. 'lease', P .. 'ix'
local ALIAS, TOPICS, CHAN = P .. 'alias', P .. 'topics', P .. 'ev'
-- A message due within NEAR ms of the script's clock goes straight to its ready set.
local NEAR = 1000
-- MAXMS caps due times: queue.MaxDeliverAt in Unix milliseconds.
local MAXMS = 9214646400000
-- WINDOW (ms) is how long a message acked or cancelled within WINDOW of its due time leaves a
-- tombstone, so that a Put retried after its reply was lost (the engine retries for less than
-- WINDOW) does not store the message again.
local WINDOW = 10000

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

-- parse decodes a record's header; its payload starts at byte r.body.
local function parse(rec)
  local due, req, att, tok, aux, nonce, tlen, p =
    string.match(rec, '^(%-?%d+),(%-?%d*),(%d+),([^,]*),([^,]*),([^,]*),(%d+);()')
  if not due then error('redisq: malformed record') end
  tlen = tonumber(tlen)
  return {due = tonumber(due), req = req, att = tonumber(att), tok = tok, aux = aux, nonce = nonce,
    topic = string.sub(rec, p, p + tlen - 1), body = p + tlen}
end

local function payload(rec, r) return string.sub(rec, r.body) end

local function encode(r, pl)
  return fmt(r.due) .. ',' .. r.req .. ',' .. fmt(r.att) .. ',' .. r.tok .. ',' .. r.aux .. ','
    .. r.nonce .. ',' .. fmt(#r.topic) .. ';' .. r.topic .. pl
end

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

-- D holds the changes of the counters; EW and EL a second and a lease deadline that this script
-- made the shard's earliest; ER, per topic given a ready message here, its earlier head and the
-- earliest due time added (ERN keeps the topics in order).
local D = {sched = 0, ready = 0, leased = 0}
local EW, EL = false, false
local ER, ERN = {}, {}

-- IXN tells whether the index of moved messages has entries, so that the common case (generated
-- IDs in the seconds they name) skips it.
local IXN
local function ix_used()
  if IXN == nil then IXN = redis.call('EXISTS', IX) == 1 end
  return IXN
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
end

-- to_wheel puts a message in the hash of its second (a decimal string); index records the second
-- in IX, for a message whose ID does not name it.
local function to_wheel(id, rec, sec, index)
  local k = wkey(sec)
  redis.call('HSET', k, id, rec)
  if index then
    redis.call('HSET', IX, id, sec)
    IXN = true
  end
  D.sched = D.sched + 1
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
    to_wheel(id, rec, fmt(sec), true)
  end
end

-- remove deletes a message found by locate (where) with record r.
local function remove(id, where, r)
  if where == true then
    redis.call('HDEL', LIVE, id)
    if redis.call('ZREM', LEASE, id) == 1 then
      D.leased = D.leased - 1
    elseif redis.call('ZREM', rkey(r.topic), id) == 1 then
      D.ready = D.ready - 1
      if redis.call('EXISTS', rkey(r.topic)) == 0 then redis.call('SREM', TOPICS, r.topic) end
    end
  else
    local k = wkey(where)
    redis.call('HDEL', k, id)
    if redis.call('EXISTS', k) == 0 then redis.call('ZREM', SECS, where) end
    if ix_used() then redis.call('HDEL', IX, id) end
    D.sched = D.sched - 1
  end
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

local function backoff(att)
  local d = CFG.first
  for _ = 2, att do
    if d >= CFG.max then break end
    d = d * 2
  end
  if d > CFG.max then d = CFG.max end
  return d
end

-- fail records a failed delivery of a message in LIVE, no longer leased: it is due again after
-- delay (or the backoff when delay is nil), or moves to its dead-letter topic.
local function fail(id, r, pl, delay)
  if r.req == '' then r.req = fmt(r.due) end
  local dead = CFG.maxatt > 0 and r.att >= CFG.maxatt
  local due
  if dead and not is_dead_topic(r.topic) then
    if CFG.dlq ~= '' then r.topic = CFG.dlq else r.topic = r.topic .. '.dead' end
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
  place(id, r, pl, true)
end

-- promote moves to the ready sets the seconds that start within lead ms of NOW, at most about
-- budget messages; it returns how many it moved and the lateness (ms) of up to 64 moved late.
local function promote(lead, budget)
  local m = meta()
  local limit = math.floor((NOW + lead) / 1000)
  local moved, late = 0, {}
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
      to_ready(id, rec, r.topic, r.due)
      if r.due < NOW and #late < 64 then late[#late + 1] = NOW - r.due end
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
  return moved, late
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
      fail(id, r, payload(rec, r), nil)
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
-- It returns the shard's event count.
local function finish(kind, owner, wsec, wcount, lms)
  local m = meta()
  if m.dirty then
    redis.call('HSET', META, 'adv', fmt(m.adv), 'drain', m.drain or '', 'cur', m.cur)
  end
  for k, v in pairs(D) do
    if v ~= 0 then redis.call('HINCRBY', META, k, v) end
  end
  local heads = {}
  for _, topic in ipairs(ERN) do
    local t = ER[topic]
    if not t.old or t.min < t.old then
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
