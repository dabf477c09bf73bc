-- message (read-only) finds a waiting message. ARGV: ID.
-- Replies {NOW, 's', record} for a message in the wheel; {NOW, 'r', record, due} for one in a
-- ready set (due, or promoted ahead of its due time); {NOW, 'l', record, deadline} for a leased
-- one; {NOW, 'alias', alias} for an ID whose message lives on the shard the alias names; {NOW,
-- 'none'} otherwise.
local id = ARGV[1]
local rec = locate(id)
if not rec then
  local a = redis.call('HGET', ALIAS, id)
  if a then return {NOW, 'alias', a} end
  return {NOW, 'none'}
end
local r = parse(rec)
local s = state(id, r.topic)
if s == 'l' then return {NOW, 'l', rec, redis.call('ZSCORE', LEASE, id)} end
if s == 'r' then return {NOW, 'r', rec, r.due} end
return {NOW, 's', rec}
