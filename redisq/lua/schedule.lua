-- schedule changes the shard's schedules and puts their fires (see "Schedules" in doc.go). ARGV[1]
-- is the operation, the rest its arguments; a fire is given as its ID and nominal time (ms), and
-- is put due then (at once if it passed), unless a message waits under its ID already.
--   set     name, nonce, start, next, act, misfire, overlap, topic, spec, zone, payload, n, fires:
--           creates or replaces the schedule (a paused one stays paused, and puts no fire), after
--           removing the replaced one's fire that is not yet due. Replies {NOW, ver, 'new'|'replaced'}
--           ('same' and the first answer for a repeat of the call with the same nonce).
--   fire    k, then k times: name, gen, next expected, next, act, missed, check, n, fires: for each
--           schedule whose gen and next are as expected and that is not paused, puts the fires
--           (none, counted as missed, when check is '1' and its latest fire still waits), records
--           next and act. Replies {NOW, ver, per schedule 'ok'|'stale', fired}.
--   trigger name, id, nominal: puts one fire. Replies {NOW, ver, 'new'|'same'|'none', ''}.
--   delete  name: removes the schedule and its fire that is not yet due. Replies {NOW, ver, 1|0}.
--   pause   name: removes the fire that is not yet due and stops the fires. {NOW, ver, 'ok'|'none'}.
--   resume  name, gen, next, act, n, fires: ends a pause. {NOW, ver, 'ok'|'none'|'stale'|'running'}.
-- Each operation publishes "s <ms|->" with the shard's earliest act time when it changed.
local SCH, SACT, SNAMES = P .. 'sch', P .. 'sact', P .. 'snames'
local op = ARGV[1]

-- A schedule's record: see sparse (prelude.lua).
local function sencode(s)
  return fmt(s.gen) .. ',' .. s.created .. ',' .. s.updated .. ',' .. s.start .. ',' .. s.next .. ','
    .. s.paused .. ',' .. fmt(s.fires) .. ',' .. fmt(s.misfires) .. ',' .. s.misfire .. ',' .. s.overlap .. ','
    .. s.nonce .. ',' .. s.cflag .. ',' .. s.last .. ',' .. s.prev .. ',' .. fmt(#s.topic) .. ','
    .. fmt(#s.spec) .. ',' .. fmt(#s.zone) .. ';' .. s.topic .. s.spec .. s.zone .. s.pl
end

local function earliest_act()
  local h = redis.call('ZRANGE', SACT, 0, 0, 'WITHSCORES')
  if h[1] then return h[2] end
  return '-'
end
local BEFORE = earliest_act()

-- putfire puts the fire id of schedule s due at its nominal time (at once if that passed), and
-- reports whether it did: not when a message (or a batch's alias) waits under the ID.
local function putfire(s, id, nominal)
  if locate(id) or redis.call('HEXISTS', ALIAS, id) == 1 then return false end
  local due = math.min(math.max(nominal, NOW), MAXMS)
  local req = ''
  if due ~= nominal then req = fmt(nominal) end
  place(id, {due = due, req = req, att = 0, tok = '', aux = '', nonce = '', fail = '', dead = '', origin = '',
    topic = s.topic, hdr = ''}, s.pl)
  tcount('p', s.topic, 1)
  if s.last ~= id then s.prev, s.last = s.last, id end
  s.fires = s.fires + 1
  return true
end

-- putfires puts the n fires given from ARGV[i] on (ID, nominal ms), and returns how many it put.
local function putfires(s, i, n)
  local put = 0
  for j = 0, n - 1 do
    if putfire(s, ARGV[i + 2 * j], tonumber(ARGV[i + 2 * j + 1])) then put = put + 1 end
  end
  return put
end

-- unfire removes schedule s's latest fire if it is not yet due (nor leased: a message nacked
-- into the future is due again, not a fire to come).
local function unfire(s)
  if s.last == '' then return end
  local rec = locate(s.last)
  if not rec then return end
  local r = parse(rec)
  if r.due > NOW and r.origin == '' and not redis.call('ZSCORE', LEASE, s.last) then
    remove(s.last, r)
    s.last, s.prev = s.prev, ''
    s.fires = s.fires - 1
    redis.call('HINCRBY', META, 'schf', -1)
  end
end

local function setact(name, act)
  if act == '-1' then redis.call('ZREM', SACT, name) else redis.call('ZADD', SACT, act, name) end
end

local function count(field, n)
  if n ~= 0 then redis.call('HINCRBY', META, field, n) end
end

local out = {NOW, 0}
if op == 'set' then
  local name, nonce = ARGV[2], ARGV[3]
  local old = redis.call('HGET', SCH, name)
  local s
  if old then
    s = sparse(old)
    if s.nonce == nonce then
      local a = 'replaced'
      if s.cflag == '1' then a = 'new' end
      out[3] = a
      out[2] = finish('m')
      return out
    end
    unfire(s)
    s.cflag = '0'
    out[3] = 'replaced'
  else
    s = {created = fmt(NOW), paused = '0', fires = 0, misfires = 0, last = '', prev = '', cflag = '1', gen = 0}
    redis.call('ZADD', SNAMES, 0, name)
    redis.call('HINCRBY', META, 'schn', 1)
    out[3] = 'new'
  end
  s.gen = s.gen + 1
  s.updated, s.nonce = fmt(NOW), nonce
  s.start, s.next = ARGV[4], ARGV[5]
  s.misfire, s.overlap, s.topic, s.spec, s.zone, s.pl = ARGV[7], ARGV[8], ARGV[9], ARGV[10], ARGV[11], ARGV[12]
  if s.paused == '0' then
    count('schf', putfires(s, 14, tonumber(ARGV[13])))
    setact(name, ARGV[6])
  else
    setact(name, '-1')
  end
  redis.call('HSET', SCH, name, sencode(s))
elseif op == 'fire' then
  local k, i = tonumber(ARGV[2]), 3
  local fired, missed = 0, 0
  for _ = 1, k do
    local name, gen, expect, nx, act, miss, check, n = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3],
      ARGV[i + 4], tonumber(ARGV[i + 5]), ARGV[i + 6], tonumber(ARGV[i + 7])
    local rec = redis.call('HGET', SCH, name)
    local s = rec and sparse(rec)
    if not s or fmt(s.gen) ~= gen or s.next ~= expect or s.paused == '1' then
      out[#out + 1] = 'stale'
      out[#out + 1] = 0
    else
      local put = 0
      if check == '1' and fire_waits(s) then
        miss = miss + n
      else
        put = putfires(s, i + 8, n)
      end
      s.next = nx
      s.misfires = s.misfires + miss
      fired, missed = fired + put, missed + miss
      setact(name, act)
      redis.call('HSET', SCH, name, sencode(s))
      out[#out + 1] = 'ok'
      out[#out + 1] = put
    end
    i = i + 8 + 2 * n
  end
  count('schf', fired)
  count('schm', missed)
elseif op == 'trigger' then
  local name = ARGV[2]
  local rec = redis.call('HGET', SCH, name)
  if not rec then
    out[3] = 'none'
  else
    local s = sparse(rec)
    if putfire(s, ARGV[3], tonumber(ARGV[4])) then
      out[3] = 'new'
      count('schf', 1)
      redis.call('HSET', SCH, name, sencode(s))
    else
      out[3] = 'same'
    end
  end
elseif op == 'delete' then
  local name = ARGV[2]
  local rec = redis.call('HGET', SCH, name)
  out[3] = 0
  if rec then
    local s = sparse(rec)
    unfire(s)
    redis.call('HDEL', SCH, name)
    redis.call('ZREM', SACT, name)
    redis.call('ZREM', SNAMES, name)
    redis.call('HINCRBY', META, 'schn', -1)
    if s.paused == '1' then redis.call('HINCRBY', META, 'schp', -1) end
    out[3] = 1
  end
elseif op == 'pause' then
  local name = ARGV[2]
  local rec = redis.call('HGET', SCH, name)
  out[3] = 'none'
  if rec then
    local s = sparse(rec)
    if s.paused == '0' then
      unfire(s)
      s.paused = '1'
      redis.call('ZREM', SACT, name)
      redis.call('HINCRBY', META, 'schp', 1)
      redis.call('HSET', SCH, name, sencode(s))
    end
    out[3] = 'ok'
  end
elseif op == 'resume' then
  local name = ARGV[2]
  local rec = redis.call('HGET', SCH, name)
  if not rec then
    out[3] = 'none'
  else
    local s = sparse(rec)
    if s.paused == '0' then
      out[3] = 'running'
    elseif fmt(s.gen) ~= ARGV[3] then
      out[3] = 'stale'
    else
      s.paused, s.next = '0', ARGV[4]
      count('schf', putfires(s, 7, tonumber(ARGV[6])))
      setact(name, ARGV[5])
      redis.call('HINCRBY', META, 'schp', -1)
      redis.call('HSET', SCH, name, sencode(s))
      out[3] = 'ok'
    end
  end
else
  error('redisq: unknown schedule operation ' .. tostring(op))
end
out[2] = finish('m')
local after = earliest_act()
if after ~= BEFORE then redis.call('SPUBLISH', CHAN, 's ' .. after) end
return out
