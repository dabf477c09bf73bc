-- stats (read-only) replies {sched, ready, leased, early, NOW, n, sum, max, b1, ...}: the shard's
-- counters, how many ready messages are not due yet, and the lateness summary (LAT: how many
-- messages became due, their total and largest lateness in ms, and the count of each bucket of
-- LATB).
local v = redis.call('HMGET', META, 'sched', 'ready', 'leased')
local early = 0
for _, t in ipairs(redis.call('SMEMBERS', TOPICS)) do
  early = early + redis.call('ZCOUNT', rkey(t), '(' .. fmt(NOW), '+inf')
end
local out = {tonumber(v[1]) or 0, tonumber(v[2]) or 0, tonumber(v[3]) or 0, early, NOW}
local f = {'n', 'sum', 'max'}
for k = 1, #LATB + 1 do f[#f + 1] = 'b' .. k end
for _, x in ipairs(redis.call('HMGET', LAT, unpack(f))) do out[#out + 1] = tonumber(x) or 0 end
return out
