-- limit sets a topic's delivery limit in this shard: every shard keeps a copy in LIM, which the
-- receive script reads; the topic's home shard also keeps its permits (see permit). ARGV: topic,
-- rate, burst, concurrency ('' for rate: remove the limit), '1' on the topic's home shard.
-- Replies {NOW, ver, head}: the topic's next due time here (-1: none), also published, so that
-- waiting receivers of every process look again.
local topic, rate, burst, conc, home = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5] == '1'
local old = redis.call('HGET', LIM, topic)
if rate == '' then
  redis.call('HDEL', LIM, topic)
  if home then redis.call('DEL', bkey(topic), pkey(topic)) end
else
  local v = rate .. ',' .. burst .. ',' .. conc
  redis.call('HSET', LIM, topic, v)
  if home then
    local o = parse_limit(old)
    if not o or o.rate ~= tonumber(rate) or o.burst ~= tonumber(burst) then
      redis.call('HSET', bkey(topic), 'tok', burst, 'ts', NOW) -- a new rate starts full
    end
  end
end
local head = -1
local h = redis.call('ZRANGE', rkey(topic), 0, 0, 'WITHSCORES')
if h[1] then
  head = tonumber(h[2])
  ER[topic] = {old = false, min = head}
  ERN[1] = topic
end
return {NOW, finish('m'), head}
