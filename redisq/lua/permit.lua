-- permit keeps a limited topic's permits, on its home shard, by the script's clock: a token
-- bucket (bkey) for the rate and the leases granted (pkey, token -> deadline) for the concurrency.
-- ARGV: mode, then for mode 'a' (acquire): topic, n, visibility and margin (ms), n lease tokens;
-- 'r' (release): topic, the tokens to give back to the rate (unused), when they were acquired
-- (the NOW of the acquire's reply, ms), then lease tokens; 'x' (extend): n, then n times a topic,
-- a span (ms: visibility plus margin) and a lease token, whose permit then ends that span from
-- NOW, if it is held.
-- Replies {NOW, ver, granted, next}: for 'a', how many of the n tokens were granted (the first
-- ones; -1: the topic has no limit) and, when none, when the next permit comes by a time (ms;
-- -1: only when a lease ends); for 'r', how many permits it found; for 'x', {NOW, ver, found1,
-- ...}, 1 for a permit held (and extended), 0 for one not held.
if ARGV[1] == 'x' then
  local out = {NOW, 0}
  for i = 1, tonumber(ARGV[2]) do
    local o = 3 + (i - 1) * 3
    out[#out + 1] = redis.call('ZADD', pkey(ARGV[o]), 'XX', 'CH', NOW + tonumber(ARGV[o + 1]), ARGV[o + 2])
  end
  out[2] = finish('m')
  return out
end
local mode, topic = ARGV[1], ARGV[2]
local l = parse_limit(redis.call('HGET', LIM, topic))
if not l then return {NOW, 0, -1, -1} end
local pk = pkey(topic)
redis.call('ZREMRANGEBYSCORE', pk, '-inf', NOW)
local held = redis.call('ZCARD', pk)
local tok
if l.rate > 0 then
  local b = redis.call('HMGET', bkey(topic), 'tok', 'ts')
  tok = tonumber(b[1]) or l.burst
  local ts = tonumber(b[2]) or NOW
  tok = math.min(l.burst, tok + math.max(NOW - ts, 0) * l.rate / 1000)
end
local out, next = 0, -1
if mode == 'a' then
  local n, vis, margin = tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[5])
  local k = n
  if l.conc > 0 then k = math.min(k, math.max(l.conc - held, 0)) end
  if tok then k = math.min(k, math.floor(tok)) end
  if k > 0 then
    local args = {}
    for i = 1, k do
      args[#args + 1] = NOW + vis + margin
      args[#args + 1] = ARGV[5 + i]
    end
    redis.call('ZADD', pk, unpack(args))
    if tok then tok = tok - k end
  else
    if tok and tok < 1 then next = NOW + math.ceil((1 - tok) * 1000 / l.rate) end
    if l.conc > 0 and held >= l.conc then
      local e = redis.call('ZRANGE', pk, 0, 0, 'WITHSCORES')
      if e[2] then next = math.max(next, tonumber(e[2])) end
    end
  end
  out = k
else
  local refund, since = tonumber(ARGV[3]), tonumber(ARGV[4])
  local removed = 0
  if #ARGV > 4 then removed = redis.call('ZREM', pk, unpack(ARGV, 5)) end
  if not tok then refund = 0 end
  if refund > 0 then
    -- Had these tokens not been taken at since, the bucket might have been full meanwhile and
    -- lost the refill of up to rate·(NOW - since): they come back less that much, so that no
    -- window of T seconds grants more than rate·T + burst (given back whole, a taker that came
    -- meanwhile would find the bucket fuller than it could have been).
    refund = math.max(0, refund - math.max(NOW - since, 0) * l.rate / 1000)
    tok = math.min(l.burst, tok + refund)
  end
  if (removed > 0 and l.conc > 0 and held >= l.conc) or (refund > 0 and tok >= 1) then
    -- A permit came free: the receivers of the topic, in every process, look again.
    ER[topic] = {old = false, min = NOW}
    ERN[1] = topic
  end
  out = removed
end
if tok then redis.call('HSET', bkey(topic), 'tok', string.format('%.17g', tok), 'ts', NOW) end
return {NOW, finish('m'), out, next}
