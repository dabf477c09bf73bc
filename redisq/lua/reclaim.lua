-- reclaim returns the messages of a topic that a receive script leased under a token base whose
-- reply the caller lost (the connection failed after the script was sent): the topic's leases in
-- this shard whose deadline is at least lo (ms) and at most the script's clock plus the
-- visibility, and whose token begins with the base. It leases nothing anew. ARGV: topic, token
-- base (14 characters, as receive took it), lo, visibility (ms). Replies as receive does: {NOW,
-- ver, head, wsec, wcount, lms, more, id1, record1, ...}, more always 0.
local topic, base, lo, vis = ARGV[1], ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
if #base ~= 14 or not lo or not vis then
  return redis.error_reply('ERR reclaim: a token base of ' .. #base .. ' characters, lo ' .. tostring(ARGV[3]))
end
local out = {0, 0, 0, 0, 0, 0, 0}
local ids = redis.call('ZRANGEBYSCORE', lkey(topic), lo, NOW + vis)
if #ids > 0 then
  local recs = redis.call('HMGET', REC, unpack(ids))
  local n = 0
  for i, id in ipairs(ids) do
    local rec = recs[i]
    local tok = rec and string.match(rec, '^%-?%d+,%-?%d*,%d+,([^,]*),')
    if tok and string.sub(tok, 1, 14) == base then
      n = n + 1
      out[6 + 2 * n] = id
      out[7 + 2 * n] = rec
    end
  end
end
local head = -1
if not paused(topic) then
  local h = redis.call('ZRANGE', rkey(topic), 0, 0, 'WITHSCORES')
  if h[1] then head = tonumber(h[2]) end
end
local wsec, wcount, lms = next_events()
out[1], out[2], out[3], out[4], out[5], out[6], out[7] = NOW, finish('m'), head, wsec, wcount, lms, 0
return out
