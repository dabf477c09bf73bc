-- delivernow makes a scheduled message due at once. ARGV: ID, the second its ID names ('' if
-- none). Replies {NOW, ver, code, value}: 1 done, 0 no scheduled message has the ID (it is due,
-- leased, a dead letter, or not waiting), 'alias' (value: the alias, to follow to its shard).
local id, hint = ARGV[1], ARGV[2]
local where, rec = locate(id, hint)
local code, value = 0, ''
if where then
  local r = parse(rec)
  local scheduled = where ~= true
  if not scheduled and r.due > NOW and not redis.call('ZSCORE', LEASE, id) then scheduled = true end
  if scheduled and r.origin == '' then
    remove(id, where, r)
    if r.req == '' then r.req = fmt(r.due) end
    r.due = NOW
    to_ready(id, encode(r, payload(rec, r)), r.topic, NOW)
    code = 1
  end
else
  local a = redis.call('HGET', ALIAS, id)
  if a then code, value = 'alias', a end
end
return {NOW, finish('m'), code, value}
