-- peek (read-only) reports a shard's times. KEYS[3] is the shard's lock. ARGV: topics.
-- Replies {NOW, ver, wsec, wcount, lms, owner, head1, ...}: the shard's next events (see
-- next_events), the lock's owner ('' if free), and each topic's next due time (-1: none, or the
-- topic is paused).
local wsec, wcount, lms = next_events()
local owner = redis.call('HGET', KEYS[3], 'owner') or ''
local out = {NOW, meta().ver, wsec, wcount, lms, owner}
for i = 1, #ARGV do
  local h = redis.call('ZRANGE', rkey(ARGV[i]), 0, 0, 'WITHSCORES')
  if h[1] and not paused(ARGV[i]) then out[#out + 1] = tonumber(h[2]) else out[#out + 1] = -1 end
end
return out
