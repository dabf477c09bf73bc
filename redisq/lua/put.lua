-- put stores messages. ARGV: mode ('1': each message on its own, 'a': all or none), the batch token
-- ('' unless some messages are aliased from other shards), the number of messages put on other
-- shards' word that they are retried Puts (mode 'a'), the count n, then for each message: ID,
-- requested due time (ms), topic, payload, the home shard of its ID when that is another shard (''
-- otherwise), the nonce of the Put call ('' for a generated ID, which is one), and flags: 'r' when
-- an earlier attempt of this call may have stored it, 'x' to replace a waiting message that is not
-- leased (mode '1' only), and its headers as the engine encodes them ('' for none).
-- Replies {NOW, ver, code1, value1, ...}: per message 'new' (stored; value: 'r' ready, 'p' ready in
-- a paused topic, or 'w' in the wheel), 'same' (a retried Put, or a retry of this call whose message
-- is done already; value: its due time or ''), 'dup' (value: the waiting one's due time), 'leased'
-- (a replace of a leased message; value: its due time) or 'alias'
-- (value: the alias to resolve first); or {NOW, ver, 'aborted'} when the batch token is aborted or
-- too old.
local mode, token, xsame, n = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
local BASE, F = 4, 8
local aliased = nil
XDEFER = true
-- TH caches, per topic, the end of a new record's header: the empty fail, dead and origin fields,
-- the origin's and the topic's lengths, and the topic.
local TH = {}

local function check(i)
  local o = BASE + (i - 1) * F
  local id, req, topic = ARGV[o + 1], ARGV[o + 2], ARGV[o + 3]
  local rec = locate(id)
  if rec then
    local r = parse(rec)
    if same_put(rec, r, topic, req, ARGV[o + 4]) then return 'same', fmt(r.due) end
    if string.find(ARGV[o + 7], 'x', 1, true) then
      if redis.call('ZSCORE', LEASE, id) then return 'leased', fmt(r.due) end
      return 'replace', ''
    end
    return 'dup', fmt(r.due)
  end
  if aliased == nil then aliased = redis.call('EXISTS', ALIAS) == 1 end
  if aliased then
    local a = redis.call('HGET', ALIAS, id)
    if a then return 'alias', a end
  end
  if string.find(ARGV[o + 7], 'r', 1, true) and buried(id, ARGV[o + 6]) then return 'same', '' end
  return 'new', ''
end

-- RECS holds the records of write's deferred calls (ID, record, ...), for one HSET.
local RECS = {}

local function flush_recs()
  for j = 1, #RECS, 7000 do
    redis.call('HSET', REC, unpack(RECS, j, math.min(j + 6999, #RECS)))
  end
  RECS = {}
end

-- write stores message i as new and returns where: 'r' ready, 'p' ready in a paused topic, 'w'
-- in the wheel. how is 'nx' to write only if no message waits under its ID (false otherwise),
-- 'defer' to leave the record in RECS, and nil to write it.
local function write(i, how)
  local o = BASE + (i - 1) * F
  local id, req, topic, pl, home = ARGV[o + 1], ARGV[o + 2], ARGV[o + 3], ARGV[o + 4], ARGV[o + 5]
  local rq = tonumber(req)
  local due = rq
  if due < NOW then due = NOW end
  if due > MAXMS then due = MAXMS end
  local nonce, rqf, aux = ARGV[o + 6], '', ''
  -- 'y' marks a message due within WINDOW of its Put: only its ack or cancel may come before a
  -- retry of the Put, so only it leaves a tombstone (see bury).
  if due - NOW <= WINDOW then nonce = 'y' .. nonce end
  local dues = req
  if due ~= rq then rqf, dues = req, fmt(due) end
  if home ~= '' then aux = home .. '.' .. token end
  -- The record of a new message, as encode would write it, with the topic's part built once for
  -- messages without headers.
  local hdr, th = ARGV[o + 8], nil
  if hdr == '' then
    th = TH[topic]
    if not th then
      th = ',,,0,' .. fmt(#topic) .. ';' .. topic
      TH[topic] = th
    end
  else
    th = ',,,0,' .. fmt(#topic) .. ',' .. fmt(#hdr) .. ';' .. topic .. hdr
  end
  local rec = dues .. ',' .. rqf .. ',0,,' .. aux .. ',' .. nonce .. th .. pl
  if how == 'defer' then
    RECS[#RECS + 1] = id
    RECS[#RECS + 1] = rec
  elseif how == 'nx' then
    if redis.call('HSETNX', REC, id, rec) == 0 then return false end
  else
    redis.call('HSET', REC, id, rec)
  end
  tcount('p', topic, 1)
  if due <= NOW + NEAR or math.floor(due / 1000) < meta().adv then
    to_ready(id, topic, due)
    if paused(topic) then return 'p' end
    return 'r'
  end
  xadd(topic, due, id, dues)
  return 'w'
end

local out = {NOW, 0}
if mode == 'a' then
  if token ~= '' then
    local born = tonumber(string.match(token, '^(%d+)%-')) or 0
    if NOW - born > 600000 or redis.call('EXISTS', P .. 'abort:' .. token) == 1 then
      return {NOW, meta().ver, 'aborted'}
    end
  end
  local codes, vals, fresh = {}, {}, 0
  for i = 1, n do
    codes[i], vals[i] = check(i)
    if codes[i] == 'new' then fresh = fresh + 1 end
  end
  local ok = true
  for i = 1, n do
    if codes[i] == 'dup' or codes[i] == 'alias' then ok = false end
  end
  -- A batch is a retried Put only when every message is one; a retried one beside new ones is a
  -- duplicate, and so is every message when others were found waiting on other shards.
  if ok and fresh > 0 and (fresh < n or xsame > 0) then ok = false end
  if ok then
    for i = 1, n do
      if codes[i] == 'new' then vals[i] = write(i) end
    end
  end
  for i = 1, n do
    out[#out + 1] = codes[i]
    out[#out + 1] = vals[i]
  end
else
  -- Without aliases in the shard or a retry to tell, a message is new unless its ID waits here or
  -- came earlier in this call: one HMGET tells for every message, and one HSET writes the records.
  -- check reads the records, so those deferred are written before it runs.
  if aliased == nil then aliased = redis.call('EXISTS', ALIAS) == 1 end
  local waiting = {}
  if not aliased then
    local ids = {}
    for i = 1, n do ids[i] = ARGV[BASE + (i - 1) * F + 1] end
    for j = 1, n, 7000 do
      local v = redis.call('HMGET', REC, unpack(ids, j, math.min(j + 6999, n)))
      for k = 1, #v do waiting[j + k - 1] = v[k] ~= false end
    end
  end
  local seen = {}
  for i = 1, n do
    local o = BASE + (i - 1) * F
    local c, v
    if aliased or ARGV[o + 7] ~= '' or waiting[i] or seen[ARGV[o + 1]] then
      flush_recs()
      c, v = check(i)
      if c == 'replace' then
        local id = ARGV[o + 1]
        remove(id, parse(locate(id)))
        c = 'new'
      end
      if c == 'new' then v = write(i) end
    else
      c, v = 'new', write(i, 'defer')
    end
    seen[ARGV[o + 1]] = true
    out[#out + 1] = c
    out[#out + 1] = v
  end
end
flush_recs()
xflush()
out[2] = finish('m')
return out
