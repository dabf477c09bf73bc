-- tick is a shard's housekeeping: it promotes the seconds that start within lead ms and expires
-- the leases whose deadline has passed, each within budget messages, and publishes the shard's next
-- times. KEYS[3] is the shard's lock. ARGV: the delivery configuration (4), fencing token and owner
-- ('' and '' for a process acting without the lock), lead (ms), budget.
-- Replies {'fenced'} when the token is not the lock's, else {NOW, ver, wsec, wcount, lms, more,
-- moved}.
load_cfg(1)
local token, owner = ARGV[5], ARGV[6]
if token ~= '' then
  local h = redis.call('HMGET', KEYS[3], 'token', 'owner')
  if h[1] ~= token or h[2] ~= owner then return {'fenced'} end
end
local lead, budget = tonumber(ARGV[7]), tonumber(ARGV[8])
local moved = promote(lead, budget)
local expired = expire(budget)
local more = 0
if moved >= budget or expired >= budget then more = 1 end
local wsec, wcount, lms = next_events()
if owner == '' then owner = '-' end
return {NOW, finish('n', owner, wsec, wcount, lms), wsec, wcount, lms, more, moved}
