-- message (read-only) finds a waiting message. ARGV: ID, the second its ID names ('' if none).
-- Replies {NOW, 'w', record} for a message in the wheel; {NOW, 'r', record, due} for one in a
-- ready set (due, or promoted ahead of its due time); {NOW, 'l', record, deadline} for a leased
-- one; {NOW, 'alias', alias} for an ID whose message lives on the shard the alias names; {NOW,
-- 'none'} otherwise.
local id, hint = ARGV[1], ARGV[2]
local where, rec = locate(id, hint)
if not where then
  local a = redis.call('HGET', ALIAS, id)
  if a then return {NOW, 'alias', a} end
  return {NOW, 'none'}
end
if where ~= true then return {NOW, 'w', rec} end
local d = redis.call('ZSCORE', LEASE, id)
if d then return {NOW, 'l', rec, d} end
return {NOW, 'r', rec, parse(rec).due}
