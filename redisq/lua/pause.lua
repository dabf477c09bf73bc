-- pause pauses a topic in this shard, or resumes it. ARGV: topic, 'p' (pause) or 'r' (resume).
-- Replies {NOW, ver, head}: for a resume, the topic's next due time (-1: none), which is also
-- published, so that every process's receivers of the topic ask again; -1 for a pause.
local topic, mode = ARGV[1], ARGV[2]
local head = -1
if mode == 'p' then
  redis.call('SADD', PAUSED, topic)
elseif redis.call('SREM', PAUSED, topic) == 1 then
  local h = redis.call('ZRANGE', rkey(topic), 0, 0, 'WITHSCORES')
  if h[1] then
    head = tonumber(h[2])
    ER[topic] = {old = false, min = head}
    ERN[1] = topic
  end
end
return {NOW, finish('m'), head}
