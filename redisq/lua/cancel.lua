-- cancel removes a waiting message. ARGV: ID, the second its ID names ('' if none).
-- Replies {NOW, ver, code, value}: 1 removed (value: its alias to remove, or ''), 2 the ID is an
-- alias (value: the alias, to resolve on the shard it names), 0 no such message.
local id, hint = ARGV[1], ARGV[2]
local where, rec = locate(id, hint)
local code, value = 0, ''
if where then
  local r = parse(rec)
  remove(id, where, r)
  bury(id, r)
  code, value = 1, r.aux
else
  local a = redis.call('HGET', ALIAS, id)
  if a then code, value = 2, a end
end
return {NOW, finish('m'), code, value}
