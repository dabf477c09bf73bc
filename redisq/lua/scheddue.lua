-- scheddue (read-only) returns the shard's schedules whose act time has come by the script's
-- clock. ARGV: budget. Replies {NOW, earliest act time after them (-1: none), more (1: over the
-- budget), name1, record1, ...}.
local SCH, SACT = P .. 'sch', P .. 'sact'
local budget = tonumber(ARGV[1])
local names = redis.call('ZRANGEBYSCORE', SACT, '-inf', NOW, 'LIMIT', 0, budget + 1)
local more = 0
if #names > budget then
  more = 1
  names[#names] = nil
end
local nextact = -1
local h = redis.call('ZRANGEBYSCORE', SACT, '(' .. NOW, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
if h[1] then nextact = tonumber(h[2]) end
local out = {NOW, nextact, more}
if #names > 0 then
  local recs = redis.call('HMGET', SCH, unpack(names))
  for i, n in ipairs(names) do
    if recs[i] then
      out[#out + 1] = n
      out[#out + 1] = recs[i]
    end
  end
end
return out
