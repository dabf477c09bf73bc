-- prelude.lua: the definitions every script of redisq shares. The library that Redis loads (see
-- doc.go) is this file followed by each script's own, as the body of a function that calls begin
-- first: what this file defines is made once, when the library is loaded, not on every call.
-- KEYS[1] is the shard's meta key "{T}:meta", KEYS[2] its guard key "{T}:guard" (which never
-- exists, so that Redis refuses the script while the shard's slot migrates); every other key of
-- the shard is named here from KEYS[1]. See doc.go for the layout and the record format.
--
-- Everything below that a call changes (the keys it names, its clock, the caches and the counts
-- it gathers) is set anew by begin, so that nothing of one call is seen by the next.
local KEYS, ARGV
local P, META
local REC, SECS, SC, XT
local LEASE, ALIAS, TOPICS, CHAN
local TC, PAUSED, LAT, WHY, LIM
-- A message due within NEAR ms of the script's clock goes straight to its ready set.
local NEAR = 1000
-- MAXMS caps due times: queue.MaxDeliverAt in Unix milliseconds.
local MAXMS = 9214646400000
-- WINDOW (ms) is how long a message acked or cancelled within WINDOW of its due time leaves a
-- tombstone, so that a Put retried after its reply was lost (the engine retries for less than
-- WINDOW) does not store the message again.
local WINDOW = 10000
-- XMAX is the most entries a chunk of a topic's wheel holds: Redis keeps a sorted set of up to
-- 128 short members as a listpack, at a third of the memory of a larger one.
local XMAX = 128
-- SPREAD is longer than any message ID (MaxID, 1,024 bytes) and than any member or value Redis
-- keeps in a listpack, its compact encoding of a small sorted set or hash (zset-max-listpack-value
-- and hash-max-listpack-value, 64 bytes by default): writing it makes Redis convert the key to its
-- hashed encoding, which the key keeps until it is emptied. A listpack is searched from its head
-- for every member added, looked up or removed, so that a script that leases or reads many
-- messages at once in one costs the square of their number: at an instant of 1,000 fires over 16
-- shards, the two ZADDs of a receive script's 31 leases took 2.4 µs a lease in each lease set of
-- 62, and the records' HMGET and HSET 1.8 µs a lease more. The scripts write SPREAD before such a command
-- and remove it right after, in the same script: no reader sees it. (begin makes it: a library's
-- code may call only Redis's API while Redis loads it.)
local SPREAD
-- SPREADN is the fewest entries a command of a script adds or reads at once for which it spreads
-- the key first: fewer cost less in a listpack than the conversion.
local SPREADN = 16

-- NOW is the script's clock in Unix milliseconds, rounded down: a message due at d (rounded up
-- when it was put) is due once d <= NOW, so it is never early by this server's clock.
local NOW

local function fmt(n) return string.format('%d', n) end
-- bkey and pkey name a limited topic's bucket and permits, on its home shard.
local function bkey(topic) return P .. 'lb:' .. topic end
local function pkey(topic) return P .. 'lp:' .. topic end
-- parse_limit decodes a limit of LIM, "rate,burst,concurrency", or returns nil.
local function parse_limit(v)
  if not v then return nil end
  local r, b, c = string.match(v, '^([^,]*),(%d+),(%d+)$')
  if not r then return nil end
  return {rate = tonumber(r) or 0, burst = tonumber(b), conc = tonumber(c)}
end
local function rkey(topic) return P .. 'r:' .. topic end
local function lkey(topic) return P .. 'l:' .. topic end
local function dkey(topic) return P .. 'd:' .. topic end
local XIK
local function xikey(topic)
  local k = XIK[topic]
  if not k then
    k = P .. 'xi:' .. topic
    XIK[topic] = k
  end
  return k
end
-- XKP caches, per topic, the prefix of its chunks' keys: a number in a concatenation is formatted
-- as a double by the C library, which costs more than the rest of the key.
local XKP
local function xckey(topic, bound)
  local p = XKP[topic]
  if not p then
    p = P .. 'xc:' .. string.format('%d', #topic) .. ':' .. topic
    XKP[topic] = p
  end
  return p .. bound
end

-- parse decodes a record's header; its headers (hdr, the message's headers as the engine encoded
-- them, '' for none) are kept as they are, and its payload starts at byte r.body.
local function parse(rec)
  local due, req, att, tok, aux, nonce, fail, dead, olen, tlen, hlen, p = string.match(rec,
    '^(%-?%d+),(%-?%d*),(%d+),([^,]*),([^,]*),([^,]*),([^,]*),([^,]*),(%d+),(%d+),?(%d*);()')
  if not due then error('redisq: malformed record') end
  olen, tlen, hlen = tonumber(olen), tonumber(tlen), tonumber(hlen) or 0
  local t = p + olen
  local b = t + tlen
  return {due = tonumber(due), req = req, att = tonumber(att), tok = tok, aux = aux, nonce = nonce,
    fail = fail, dead = dead, origin = string.sub(rec, p, t - 1), topic = string.sub(rec, t, b - 1),
    hdr = string.sub(rec, b, b + hlen - 1), body = b + hlen}
end

local function payload(rec, r) return string.sub(rec, r.body) end

-- parse_ack decodes what ack reads of a record: the fields due, tok, aux, nonce, fail, origin and
-- topic, as parse has them, and no others. Ack decodes every record it ends, and four captures
-- and a substring fewer than parse's, with a table of seven fields not twelve, took 7% off the
-- ack script's instructions (4.45 to 4.14 million for 62 receipts, by callgrind).
local function parse_ack(rec)
  local due, tok, aux, nonce, fail, olen, tlen, p = string.match(rec,
    '^(%-?%d+),%-?%d*,%d+,([^,]*),([^,]*),([^,]*),([^,]*),[^,]*,(%d+),(%d+),?%d*;()')
  if not due then error('redisq: malformed record') end
  local t = p + tonumber(olen)
  return {due = tonumber(due), tok = tok, aux = aux, nonce = nonce, fail = fail,
    origin = string.sub(rec, p, t - 1), topic = string.sub(rec, t, t + tonumber(tlen) - 1)}
end

-- same_put reports whether a Put of topic, payload pl and requested due time req (ms, as text)
-- repeats the waiting message r, whose record is rec (a retried Put): the same topic and payload,
-- and the same requested due time or two that have both come by the script's clock. A message due
-- at once is one whatever past time asked for it: a retry of its Put may carry another (tockd
-- resolves an absent or past due time to its own clock on each request), and delayq decides so
-- too. Requested times are rounded up to the millisecond and NOW down, so a time that has come
-- may read a millisecond after NOW (as tockd's "now", sent at once, does). r.req, when set, is
-- the time the message was put with (a failure or DeliverNow keeps it there), else r.due is.
local function same_put(rec, r, topic, req, pl)
  if r.topic ~= topic or payload(rec, r) ~= pl then return false end
  local rq = r.req
  if rq == '' then rq = fmt(r.due) end
  return rq == req or (tonumber(rq) <= NOW + 1 and tonumber(req) <= NOW + 1)
end

local function encode(r, pl)
  local h = ''
  if r.hdr ~= '' then h = ',' .. fmt(#r.hdr) end
  return fmt(r.due) .. ',' .. r.req .. ',' .. fmt(r.att) .. ',' .. r.tok .. ',' .. r.aux .. ','
    .. r.nonce .. ',' .. r.fail .. ',' .. r.dead .. ',' .. fmt(#r.origin) .. ',' .. fmt(#r.topic) .. h .. ';'
    .. r.origin .. r.topic .. r.hdr .. pl
end

-- leased returns record rec as a receive leases it under token tok (no comma in it), its attempts
-- counted, and whether its origin is not empty (a dead letter's). Only the header's attempts and
-- token change, so the record is spliced there, not parsed and encoded again: for a burst of small
-- messages, parse and encode were half of the receive script's time (5 of its 10 us a message).
local function leased(rec, tok)
  local a, att, p, olen = string.match(rec, '^(%-?%d+,%-?%d*,)(%d+),[^,]*(),[^,]*,[^,]*,[^,]*,[^,]*,(%d+),')
  if not a then error('redisq: malformed record') end
  return a .. fmt(tonumber(att) + 1) .. ',' .. tok .. string.sub(rec, p), olen ~= '0'
end

-- died returns when a dead letter died (ms), from its record's dead field "<ms>.<attempts>".
local function died(r) return tonumber(string.match(r.dead, '^(%d+)')) or NOW end

-- spread_hash gives hash key its hashed encoding (see SPREAD), unless it has it or is empty.
local function spread_hash(key)
  redis.call('HSET', key, SPREAD, '')
  redis.call('HDEL', key, SPREAD)
end

-- zadd_all adds to sorted set key the scores and members of zs, {score1, member1, ...}, with one
-- ZADD; when they are SPREADN or more, the set is given its hashed encoding first (see SPREAD).
local function zadd_all(key, zs)
  if #zs < 2 * SPREADN then return redis.call('ZADD', key, unpack(zs)) end
  -- SPREAD first: a set that does not exist is made hashed at once, one that does is converted
  -- before the members are added.
  local n = redis.call('ZADD', key, 0, SPREAD, unpack(zs))
  redis.call('ZREM', key, SPREAD)
  return n - 1
end

-- M caches the shard's pointer fields; finish writes adv back when dirty.
local M
local function meta()
  if not M then
    local v = redis.call('HMGET', META, 'adv', 'ver')
    M = {adv = tonumber(v[1]) or 0, ver = tonumber(v[2]) or 0}
  end
  return M
end

-- D holds the changes of the shard's counters; TCD those of the per-topic counters in TC (field
-- "<kind><topic>": s scheduled, p puts, v deliveries, a acks, n nacks); SCD those of the scheduled messages
-- per second in SC (field: the second); EW and EL a second and a lease deadline that this script
-- made the shard's earliest; ER, per topic given a ready message here, its earlier head and the
-- earliest due time added (ERN keeps the topics in order); LN, LS, LB and LMX the lateness observed
-- (count, sum in ms, per bucket, maximum).
local D, TCD, SCD
local EW, EL
local ER, ERN
local LN, LS, LB, LMX

-- TCF caches the counters' field names per kind and topic, so that a script counting many
-- messages of a topic builds each name once.
local TCF
local function tcount(kind, topic, n)
  local fs = TCF[kind]
  if not fs then
    fs = {}
    TCF[kind] = fs
  end
  local f = fs[topic]
  if not f then
    f = kind .. topic
    fs[topic] = f
  end
  TCD[f] = (TCD[f] or 0) + n
end

-- SCD is keyed by the second as a number; flush_secs formats it.
local function scount(ms, n)
  local s = math.floor(ms / 1000)
  SCD[s] = (SCD[s] or 0) + n
end

-- LATB are the upper bounds (ms) of the lateness buckets b1.. of LAT; bucket b<#LATB+1> is above
-- the last. The engine reads them in the same order (latenessBounds in lateness.go).
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

-- LIMN tells whether any topic has a limit in this shard.
local LIMN
local function limited(topic)
  if LIMN == nil then LIMN = redis.call('EXISTS', LIM) == 1 end
  return LIMN and redis.call('HEXISTS', LIM, topic) == 1
end

-- bytes_lt compares strings byte by byte, as Redis orders the members of a sorted set (Lua's <
-- follows the server's locale).
local function bytes_lt(a, b)
  if a == b then return false end
  local n = math.min(#a, #b)
  if n <= 64 then
    -- One call for all the bytes of each: IDs share long prefixes, and a call per byte costs more.
    local x, y = {string.byte(a, 1, n)}, {string.byte(b, 1, n)}
    for i = 1, n do
      if x[i] ~= y[i] then return x[i] < y[i] end
    end
    return #a < #b
  end
  for i = 1, n do
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

-- The wheel: each topic's scheduled messages are a sequence of chunks, sorted sets of message IDs
-- scored by due time, each of at most XMAX entries and covering a range of (due time, ID).
-- xi:<topic> is a sorted set of the chunks' lower bounds, "<due ms, 14 digits><ID>", all of score
-- 0, so that ZREVRANGEBYLEX finds the chunk of an entry; the first chunk's bound is "", so that
-- every entry has one. A full chunk is split in two; an empty one is removed (the first by
-- renaming the second to it), and a small one is merged into the one before when they fit. XT
-- scores each topic with scheduled messages by its earliest due time, the first entry of its first
-- chunk: promotion takes the topics in that order.

local function xbound(ms, id) return string.format('%014d', ms) .. id end

-- xfloor returns the bound of the chunk of topic's wheel that covers bound b, or nil when the
-- topic has no scheduled message.
local function xfloor(topic, b)
  return redis.call('ZREVRANGEBYLEX', xikey(topic), '[' .. b, '-', 'LIMIT', 0, 1)[1]
end

-- XN caches the sizes of the chunks this script added to, so that a script adding many messages to
-- one chunk asks for its size once. XL caches, per topic, the last chunk's bound {ms, id, b}
-- (false: no chunk), so that messages due after every other (the usual case of delays counted from
-- now) need no search. XH caches, per topic, its score in XT (false: none).
local XN, XL, XH

-- XDEFER makes xadd hold a chunk's new entries in XP (key -> score, member, ...; XPK keeps the
-- keys in order) until the chunk must split or xflush writes them, so that a script adding many
-- messages to a chunk adds them with one ZADD. Only a script that reads no chunk after adding to
-- it (put) sets it, and calls xflush before it ends.
local XDEFER
local XP, XPK

local function xflush1(k)
  local a = XP[k]
  if not a then return end
  XP[k] = nil
  local added = 0
  for i = 1, #a, 7000 do
    added = added + redis.call('ZADD', k, unpack(a, i, math.min(i + 6999, #a)))
  end
  if XN[k] then XN[k] = XN[k] - (#a / 2 - added) end
end

local function xflush()
  for _, k in ipairs(XPK) do xflush1(k) end
  XPK = {}
end

local function xlast(topic)
  local l = XL[topic]
  if l == nil then
    local b = redis.call('ZRANGE', xikey(topic), -1, -1)[1]
    l = false
    if b then l = {ms = tonumber(string.sub(b, 1, 14)) or 0, id = string.sub(b, 15), b = b} end
    XL[topic] = l
  end
  return l
end

local function xhead(topic)
  local h = XH[topic]
  if h == nil then
    h = tonumber(redis.call('ZSCORE', XT, topic)) or false
    XH[topic] = h
  end
  return h
end

-- xadd schedules message id of topic, due at ms (mss: the same as a string, or nil), in the wheel;
-- a message after the last chunk's bound (as delays counted from now are, and generated IDs put
-- for one instant) needs no search. A full chunk gives its upper half to a new chunk, added in
-- descending order so that each entry goes to the head of the new listpack; the last chunk, when the entry added is among its last XMAX/8 (messages put in about the order of
-- their due times), gives only the entries from it on, so that chunks filled in order stay full.
local function xadd(topic, ms, id, mss)
  local xi = xikey(topic)
  local last = xlast(topic)
  local b
  if last and (ms > last.ms or (ms == last.ms and bytes_lt(last.id, id))) then
    b = last.b
  else
    b = xfloor(topic, xbound(ms, id))
  end
  if not b then
    b = ''
    redis.call('ZADD', xi, 0, b)
    XL[topic] = {ms = 0, id = '', b = b}
  end
  local k = xckey(topic, b)
  local n = XN[k]
  if not n then n = redis.call('ZCARD', k) end
  if XDEFER then
    local a = XP[k]
    if not a then
      a = {}
      XP[k] = a
      XPK[#XPK + 1] = k
    end
    a[#a + 1] = mss or ms
    a[#a + 1] = id
    n = n + 1
  else
    n = n + redis.call('ZADD', k, mss or ms, id)
  end
  if n >= XMAX then
    XN[k] = n
    xflush1(k)
    n = XN[k]
    local from = XMAX / 2
    local tail = XL[topic] and XL[topic].b == b
    if tail then
      local r = redis.call('ZRANK', k, id)
      if r >= n - XMAX / 8 then from = r end
    end
    local kv = redis.call('ZRANGE', k, from, -1, 'WITHSCORES')
    local nms = tonumber(kv[2])
    local nb = xbound(nms, kv[1])
    local args = {}
    for i = #kv - 1, 1, -2 do
      args[#args + 1] = kv[i + 1]
      args[#args + 1] = kv[i]
    end
    local nk = xckey(topic, nb)
    redis.call('ZADD', nk, unpack(args))
    redis.call('ZREMRANGEBYRANK', k, from, -1)
    redis.call('ZADD', xi, 0, nb)
    XN[nk] = #args / 2
    n = from
    if tail then XL[topic] = {ms = nms, id = kv[1], b = nb} end
  end
  XN[k] = n
  local h = xhead(topic)
  if not h or ms < h then
    redis.call('ZADD', XT, ms, topic)
    XH[topic] = ms
  end
  D.sched = D.sched + 1
  tcount('s', topic, 1)
  scount(ms, 1)
end

-- xsettle mends topic's wheel after its first chunk lost entries: an empty first chunk takes the
-- second's entries (renamed), or the topic leaves XT when it has none; the topic's score in XT
-- follows its first entry.
local function xsettle(topic)
  local k = xckey(topic, '')
  XN[k] = nil
  if redis.call('EXISTS', k) == 0 then
    local xi = xikey(topic)
    local nb = redis.call('ZRANGE', xi, 1, 1)[1]
    XL[topic] = nil
    if not nb then
      redis.call('DEL', xi)
      redis.call('ZREM', XT, topic)
      XH[topic] = false
      return
    end
    local nk = xckey(topic, nb)
    redis.call('RENAME', nk, k)
    redis.call('ZREM', xi, nb)
    XN[nk] = nil
  end
  local f = redis.call('ZRANGE', k, 0, 0, 'WITHSCORES')
  local h = tonumber(f[2])
  if h ~= XH[topic] then
    redis.call('ZADD', XT, h, topic)
    XH[topic] = h
  end
end

-- xdel removes message id of topic, due at ms, from the wheel; it reports whether it was there.
local function xdel(topic, ms, id)
  local b = xfloor(topic, xbound(ms, id))
  if not b then return false end
  local k = xckey(topic, b)
  if redis.call('ZREM', k, id) == 0 then return false end
  D.sched = D.sched - 1
  tcount('s', topic, -1)
  scount(ms, -1)
  if b == '' then
    xsettle(topic)
    return true
  end
  local n = redis.call('ZCARD', k)
  XN[k] = n
  local xi = xikey(topic)
  if n == 0 then
    XL[topic] = nil
    redis.call('ZREM', xi, b)
  elseif n < XMAX / 8 then
    local pb = redis.call('ZREVRANGEBYLEX', xi, '(' .. b, '-', 'LIMIT', 0, 1)[1]
    local pk = xckey(topic, pb)
    if redis.call('ZCARD', pk) + n <= XMAX * 3 / 4 then
      redis.call('ZUNIONSTORE', pk, 2, pk, k)
      redis.call('DEL', k)
      redis.call('ZREM', xi, b)
      XN[k], XN[pk], XL[topic] = nil, nil, nil
    end
  end
  return true
end

-- locate returns the record of the waiting message id, or false.
local function locate(id)
  return redis.call('HGET', REC, id) or false
end

-- state returns where the waiting message id of topic is: 'l' leased, 'r' in its ready set (due,
-- or promoted ahead of its due time), 's' in the wheel.
local function state(id, topic)
  if redis.call('ZSCORE', LEASE, id) then return 'l' end
  if redis.call('ZSCORE', rkey(topic), id) then return 'r' end
  return 's'
end

-- to_ready makes the message id of topic, whose record is in REC, due at due (maybe a little
-- ahead) in its topic's ready set.
local function to_ready(id, topic, due)
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
  redis.call('ZADD', rkey(topic), due, id)
  D.ready = D.ready + 1
  observe_late(math.max(NOW - due, 0))
end

-- place stores a message whose record r changed and puts it where its due time says: its ready
-- set if it is due soon or its second was promoted already, the wheel otherwise.
local function place(id, r, pl)
  redis.call('HSET', REC, id, encode(r, pl))
  if r.due <= NOW + NEAR or math.floor(r.due / 1000) < meta().adv then
    to_ready(id, r.topic, r.due)
  else
    xadd(r.topic, r.due, id)
  end
end

-- unlease ends the lease of a message of topic; it reports whether it was leased.
local function unlease(id, topic)
  if redis.call('ZREM', LEASE, id) == 0 then return false end
  redis.call('ZREM', lkey(topic), id)
  D.leased = D.leased - 1
  return true
end

-- unready takes a message of topic out of its ready set; it reports whether it was there.
local function unready(id, topic)
  if redis.call('ZREM', rkey(topic), id) == 0 then return false end
  D.ready = D.ready - 1
  if redis.call('EXISTS', rkey(topic)) == 0 then redis.call('SREM', TOPICS, topic) end
  return true
end

-- has_reason reports whether record r's last failure gave a reason, kept in WHY: its kind is in
-- upper case ('N' nacked, 'D' dead-lettered by its consumer).
local function has_reason(r)
  local k = string.byte(r.fail, 1)
  return k ~= nil and k >= 65 and k <= 90
end

-- forget_failure forgets the last failure of record r and its reason.
local function forget_failure(id, r)
  if has_reason(r) then redis.call('HDEL', WHY, id) end
  r.fail = ''
end

-- remove deletes the waiting message id with record r, to be done or placed again (its reason
-- in WHY stays: a message that is done forgets it with forget_failure).
local function remove(id, r)
  redis.call('HDEL', REC, id)
  if not unlease(id, r.topic) and not unready(id, r.topic) then xdel(r.topic, r.due, id) end
  if r.origin ~= '' then redis.call('ZREM', dkey(r.origin), id) end
end

-- bury leaves the tombstone of a message just acked or cancelled, if a retry of its Put may still
-- come: it was put due within WINDOW (its nonce field starts with 'y'; a retry of the Put of a
-- message due later comes before it is due, and finds it waiting) and it was due within WINDOW.
-- The tombstone is a member "<nonce>|<id>" of the set of this second, which expires after WINDOW.
-- tomb returns the tombstone member of message id with record r, or nil when it leaves none; bury_all
-- adds the members ms (at most a thousand) to the set of this second.
local function tomb(id, r)
  if string.sub(r.nonce, 1, 1) ~= 'y' or NOW - r.due > WINDOW then return nil end
  return string.sub(r.nonce, 2) .. '|' .. id
end

local function bury_all(ms)
  if #ms == 0 then return end
  local k = P .. 'done:' .. fmt(math.floor(NOW / 1000))
  local added = redis.call('SADD', k, unpack(ms))
  -- Every member new: the set is new, and expires.
  if added > 0 and redis.call('SCARD', k) == added then redis.call('EXPIRE', k, WINDOW / 1000 + 2) end
end

local function bury(id, r)
  local m = tomb(id, r)
  if m then bury_all({m}) end
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

-- fail records a failed delivery of a message that is no longer leased, and why ('n' nacked, 'x'
-- lease expired, 'd' nacked to the dead letters at once) with the consumer's reason (nil or ''
-- for none, kept in WHY): it is due again after delay (or the backoff when delay is nil), or moves
-- to its dead-letter topic, keeping the topic it died on, when and after how many attempts. A dead
-- letter that fails on the dead-letter topic is a dead letter again (it was not one while leased).
local function fail(id, r, pl, delay, why, reason)
  if r.req == '' then r.req = fmt(r.due) end
  local had = has_reason(r)
  if reason and reason ~= '' then
    redis.call('HSET', WHY, id, reason)
    why = string.upper(why)
  elseif had then
    redis.call('HDEL', WHY, id)
  end
  r.fail = why .. fmt(NOW)
  local dead = CFG.maxatt > 0 and r.att >= CFG.maxatt
  if why == 'd' or why == 'D' then dead = true end
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
  place(id, r, pl)
end

-- promote moves to the ready sets the scheduled messages of the seconds that start within lead
-- ms of NOW, earliest topic first, at most about budget of them; it returns how many it moved.
-- Their records stay where they are.
local function promote(lead, budget)
  local m = meta()
  local limit = math.floor((NOW + lead) / 1000)
  local lim = (limit + 1) * 1000
  local moved = 0
  while budget > 0 do
    local h = redis.call('ZRANGE', XT, 0, 0, 'WITHSCORES')
    if not h[1] or tonumber(h[2]) >= lim then break end
    local topic = h[1]
    XH[topic] = tonumber(h[2])
    local k = xckey(topic, '')
    local kv = redis.call('ZRANGEBYSCORE', k, '-inf', '(' .. fmt(lim), 'WITHSCORES', 'LIMIT', 0, budget)
    local n = #kv / 2
    for i = 1, #kv, 2 do
      local ms = tonumber(kv[i + 1])
      to_ready(kv[i], topic, ms)
      scount(ms, -1)
    end
    if n > 0 then redis.call('ZREMRANGEBYRANK', k, 0, n - 1) end
    D.sched = D.sched - n
    tcount('s', topic, -n)
    local before = XH[topic]
    xsettle(topic)
    -- Nothing moved and the head stayed: XT is out of step with the wheel. Stop rather than spin
    -- (a script must not fail after writing: Redis does not undo its writes).
    if n == 0 and XH[topic] == before then break end
    moved = moved + n
    budget = budget - n
  end
  if limit + 1 > m.adv then
    m.adv = limit + 1
    m.dirty = true
  end
  return moved
end

-- expire fails the leases whose deadline has passed, at most budget of them; it returns how many.
local function expire(budget)
  local ids = redis.call('ZRANGEBYSCORE', LEASE, '-inf', NOW, 'LIMIT', 0, budget)
  if #ids == 0 then return 0 end
  redis.call('ZREM', LEASE, unpack(ids))
  D.leased = D.leased - #ids
  for _, id in ipairs(ids) do
    local rec = locate(id)
    if rec then
      local r = parse(rec)
      redis.call('ZREM', lkey(r.topic), id)
      fail(id, r, payload(rec, r), nil, 'x')
    end
  end
  return #ids
end

-- flush_secs applies the changes of the per-second counts: SC counts the scheduled messages of
-- each second, and SECS holds the seconds whose count is not 0. It notes in EW a second made the
-- earliest.
local function flush_secs()
  if next(SCD) == nil then return end
  local before = redis.call('ZRANGE', SECS, 0, 0)[1]
  for sn, d in pairs(SCD) do
    if d ~= 0 then
      local s = fmt(sn)
      local n = redis.call('HINCRBY', SC, s, d)
      if n <= 0 then
        redis.call('HDEL', SC, s)
        redis.call('ZREM', SECS, s)
      elseif n == d then
        redis.call('ZADD', SECS, s, s)
      end
    end
  end
  SCD = {}
  local first = redis.call('ZRANGE', SECS, 0, 0)[1]
  if first and first ~= before and (not before or tonumber(first) < tonumber(before)) then
    EW = tonumber(first)
  end
end

-- next_events returns the shard's earliest second with scheduled messages (-1: none) and its
-- count, and its earliest lease deadline (-1: none).
local function next_events()
  flush_secs()
  local wsec, wcount, lms = -1, 0, -1
  local first = redis.call('ZRANGE', SECS, 0, 0)[1]
  if first then
    wsec = tonumber(first)
    wcount = tonumber(redis.call('HGET', SC, first)) or 0
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
  flush_secs()
  local m = meta()
  if m.dirty then redis.call('HSET', META, 'adv', fmt(m.adv)) end
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

-- A schedule's record: a header of comma-separated fields, then its topic, spec, zone and payload.
--   gen,created,updated,start,next,paused,fires,misfires,misfire,overlap,nonce,created by nonce,
--   latest fire ID,the one before,topic length,spec length,zone length;<topic><spec><zone><payload>
local function sparse(rec)
  local gen, cr, up, st, nx, pa, fi, mi, mf, ov, nonce, cf, last, prev, tl, sl, zl, p = string.match(rec,
    '^(%d+),(%d+),(%d+),(%-?%d+),(%-?%d+),([01]),(%d+),(%d+),(%a*),(%a*),([^,]*),([01]),([^,]*),([^,]*),(%d+),(%d+),(%d+);()')
  if not gen then error('redisq: malformed schedule record') end
  tl, sl, zl = tonumber(tl), tonumber(sl), tonumber(zl)
  return {gen = tonumber(gen), created = cr, updated = up, start = st, next = nx, paused = pa,
    fires = tonumber(fi), misfires = tonumber(mi), misfire = mf, overlap = ov, nonce = nonce, cflag = cf,
    last = last, prev = prev, topic = string.sub(rec, p, p + tl - 1), spec = string.sub(rec, p + tl, p + tl + sl - 1),
    zone = string.sub(rec, p + tl + sl, p + tl + sl + zl - 1), pl = string.sub(rec, p + tl + sl + zl)}
end

-- fire_waits reports whether schedule s's latest fire still waits (scheduled, due or leased; a
-- dead letter has failed for good and does not count).
local function fire_waits(s)
  if s.last == '' then return false end
  local rec = locate(s.last)
  return rec and parse(rec).origin == ''
end

-- begin sets up a call of a script on the shard of keys with arguments argv: it names the shard's
-- keys, reads the clock and empties what a call gathers. The first of argv is the stamp of the
-- deployment's configuration as the caller holds it (the script's own arguments follow it, as
-- ARGV[1] on); {T}:meta's dep is the stamp of the configuration the shard belongs to. begin
-- refuses, before anything else is read or written, a shard without one (Redis lost its data: a
-- restart without persistence, FLUSHALL) or with another (the configuration was made anew since
-- the caller read it): no process acts on a shard with a view of the deployment that is no longer
-- the deployment's. It returns the refusal, for the script to return, or nil; the caller then
-- reconciles.
local function begin(keys, argv)
  KEYS, ARGV = keys, argv
  META = KEYS[1]
  local stamp = table.remove(ARGV, 1)
  local dep = redis.call('HGET', META, 'dep')
  if dep ~= stamp then
    if not dep then return redis.error_reply('TOCKLOST the shard has no deployment stamp: Redis lost its data') end
    return redis.error_reply('TOCKSTALE the shard is of deployment ' .. dep .. ', not ' .. tostring(stamp))
  end
  P = string.sub(META, 1, -5)
  REC, SECS, SC, XT = P .. 'rec', P .. 'secs', P .. 'sc', P .. 'xt'
  LEASE, ALIAS, TOPICS, CHAN = P .. 'lease', P .. 'alias', P .. 'topics', P .. 'ev'
  TC, PAUSED, LAT, WHY, LIM = P .. 'tc', P .. 'paused', P .. 'lat', P .. 'why', P .. 'lim'
  local t = redis.call('TIME')
  NOW = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  XIK, XKP, M = {}, {}, nil
  D, TCD, SCD = {sched = 0, ready = 0, leased = 0}, {}, {}
  EW, EL = false, false
  ER, ERN = {}, {}
  LN, LS, LB, LMX = 0, 0, {}, 0
  TCF = {}
  PAUSEDN, LIMN = nil, nil
  XN, XL, XH = {}, {}, {}
  XDEFER, XP, XPK = false, {}, {}
  CFG = nil
  if not SPREAD then SPREAD = string.rep('~', 1025) end
end
