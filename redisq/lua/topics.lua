-- topics (read-only) reports every topic the shard holds messages or counters of, or has paused.
-- Replies {NOW, n, then per topic: name, scheduled (in the wheel, or ready ahead of its due time),
-- due, leased, dead (dead letters that died on it and are not leased), the due time of its oldest
-- due message (-1: none), paused (1 or 0), puts, deliveries, acks, nacks}.
local names, seen, counts = {}, {}, {}
local function see(t)
  if not seen[t] then
    seen[t] = true
    names[#names + 1] = t
  end
end
local kv = redis.call('HGETALL', TC)
for i = 1, #kv, 2 do
  see(string.sub(kv[i], 2))
  counts[kv[i]] = tonumber(kv[i + 1])
end
for _, t in ipairs(redis.call('SMEMBERS', TOPICS)) do see(t) end
for _, t in ipairs(redis.call('SMEMBERS', PAUSED)) do see(t) end
local out = {NOW, #names}
for _, t in ipairs(names) do
  local z = rkey(t)
  local due = redis.call('ZCOUNT', z, '-inf', NOW)
  local early = redis.call('ZCARD', z) - due
  local oldest = -1
  if due > 0 then oldest = tonumber(redis.call('ZRANGE', z, 0, 0, 'WITHSCORES')[2]) end
  out[#out + 1] = t
  out[#out + 1] = (counts['s' .. t] or 0) + early
  out[#out + 1] = due
  out[#out + 1] = redis.call('ZCARD', lkey(t))
  out[#out + 1] = redis.call('ZCARD', dkey(t))
  out[#out + 1] = oldest
  out[#out + 1] = redis.call('SISMEMBER', PAUSED, t)
  out[#out + 1] = counts['p' .. t] or 0
  out[#out + 1] = counts['v' .. t] or 0
  out[#out + 1] = counts['a' .. t] or 0
  out[#out + 1] = counts['n' .. t] or 0
end
return out
