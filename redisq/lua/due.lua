-- due (read-only) replies {sec1, count1, ...} for the seconds in [ARGV[1], ARGV[2]) that have
-- messages waiting: in the wheel (SC), and promoted to a ready set ahead of their due time. A
-- second may come twice.
local from, to = tonumber(ARGV[1]), tonumber(ARGV[2])
local out = {}
for _, s in ipairs(redis.call('ZRANGEBYSCORE', SECS, from, '(' .. to)) do
  out[#out + 1] = tonumber(s)
  out[#out + 1] = tonumber(redis.call('HGET', SC, s)) or 0
end
for _, t in ipairs(redis.call('SMEMBERS', TOPICS)) do
  local z = rkey(t)
  local last = redis.call('ZRANGE', z, -1, -1, 'WITHSCORES')[2]
  if last and tonumber(last) > NOW then
    for s = math.max(math.floor(NOW / 1000), from), math.min(math.floor(tonumber(last) / 1000), to - 1) do
      local c = redis.call('ZCOUNT', z, math.max(s * 1000, NOW + 1), s * 1000 + 999)
      if c > 0 then
        out[#out + 1] = s
        out[#out + 1] = c
      end
    end
  end
end
return out
