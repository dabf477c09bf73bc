-- stats (read-only) replies {sched, ready, leased, early, NOW}: the shard's counters, and how many
-- ready messages are not due yet.
local v = redis.call('HMGET', META, 'sched', 'ready', 'leased')
local early = 0
for _, t in ipairs(redis.call('SMEMBERS', TOPICS)) do
  early = early + redis.call('ZCOUNT', rkey(t), '(' .. fmt(NOW), '+inf')
end
return {tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0, early, NOW}
