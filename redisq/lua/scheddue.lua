-- scheddue (read-only) returns the shard's schedules whose act time has come by the script's
-- clock, and the heads of the topics the caller has receivers waiting on (the receivers' floor:
-- see Receive). ARGV: budget, then the topics. Replies {NOW, earliest act time after them (-1:
-- none), more (1: over the budget), head1, ..., name1, record1, waits1, ...}: a head per topic
-- given, its earliest ready message's due time (-1: none, or the topic is paused); waits is 1 when
-- the schedule is an OverlapSkip one whose latest fire still waits now, so that the nominal times
-- that came meanwhile are skipped.
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
for i = 2, #ARGV do
  local head = redis.call('ZRANGE', rkey(ARGV[i]), 0, 0, 'WITHSCORES')
  if head[1] and not paused(ARGV[i]) then out[#out + 1] = tonumber(head[2]) else out[#out + 1] = -1 end
end
if #names > 0 then
  local recs = redis.call('HMGET', SCH, unpack(names))
  for i, n in ipairs(names) do
    if recs[i] then
      local s, waits = sparse(recs[i]), 0
      if s.overlap == 'skip' and fire_waits(s) then waits = 1 end
      out[#out + 1] = n
      out[#out + 1] = recs[i]
      out[#out + 1] = waits
    end
  end
end
return out
