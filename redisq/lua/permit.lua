-- permit keeps a limited topic's permits, on its home shard, by the script's clock: a token
-- bucket (bkey) for the rate and the leases granted (pkey, token -> deadline) for the concurrency.
-- ARGV: mode, topic, then for mode 'a' (acquire): n, visibility and margin (ms), n lease tokens;
-- 'r' (release): the tokens to give back to the rate (unused), then lease tokens; 'x' (extend):
-- visibility plus margin (ms), then lease tokens.
-- Replies {NOW, ver, granted, next}: for 'a', how many of the n tokens were granted (the first
-- ones; -1: the topic has no limit) and, when none, when the next permit comes by a time (ms;
-- -1: only when a lease ends); for 'r' and 'x', how many permits it found.
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
elseif mode == 'r' then
  local refund = tonumber(ARGV[3])
  local removed = 0
  if #ARGV > 3 then removed = redis.call('ZREM', pk, unpack(ARGV, 4)) end
  if tok then tok = math.min(l.burst, tok + refund) end
  if (removed > 0 and l.conc > 0 and held >= l.conc) or refund > 0 then
    -- A permit came free: the receivers of the topic, in every process, look again.
    ER[topic] = {old = false, min = NOW}
    ERN[1] = topic
  end
  out = removed
else
  local deadline = NOW + tonumber(ARGV[3])
  for i = 4, #ARGV do
    out = out + redis.call('ZADD', pk, 'XX', 'CH', deadline, ARGV[i])
  end
end
if tok then redis.call('HSET', bkey(topic), 'tok', string.format('%.17g', tok), 'ts', NOW) end
return {NOW, finish('m'), out, next}
