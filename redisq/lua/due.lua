-- due (read-only) replies {sec1, count1, ...} for the seconds in [ARGV[1], ARGV[2]) that have
-- messages waiting.
local out = {}
for _, s in ipairs(redis.call('ZRANGEBYSCORE', SECS, ARGV[1], '(' .. ARGV[2])) do
  out[#out + 1] = tonumber(s)
  out[#out + 1] = redis.call('HLEN', wkey(s))
end
return out
