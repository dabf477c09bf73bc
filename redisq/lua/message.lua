-- message (read-only) finds a waiting message. ARGV: ID.
-- Replies {NOW, 's', record, 0, reason} for a message in the wheel; {NOW, 'r', record, due,
-- reason} for one in a ready set (due, or promoted ahead of its due time); {NOW, 'l', record,
-- deadline, reason} for a leased one (reason: of its last failure, '' for none); {NOW, 'alias',
-- alias} for an ID whose message lives on the shard the alias names; {NOW, 'none'} otherwise.
local id = ARGV[1]
local rec = locate(id)
if not rec then
  local a = redis.call('HGET', ALIAS, id)
  if a then return {NOW, 'alias', a} end
  return {NOW, 'none'}
end
local r = parse(rec)
local why = ''
if has_reason(r) then why = redis.call('HGET', WHY, id) or '' end
local s = state(id, r.topic)
if s == 'l' then return {NOW, 'l', rec, redis.call('ZSCORE', LEASE, id), why} end
if s == 'r' then return {NOW, 'r', rec, r.due, why} end
return {NOW, 's', rec, 0, why}
