-- cancel removes a waiting message. ARGV: ID.
-- Replies {NOW, ver, code, value}: 1 removed (value: its alias to remove, or ''), 2 the ID is an
-- alias (value: the alias, to resolve on the shard it names), 0 no such message.
local id = ARGV[1]
local rec = locate(id)
local code, value = 0, ''
if rec then
  local r = parse(rec)
  remove(id, r)
  forget_failure(id, r)
  bury(id, r)
  code, value = 1, r.aux
else
  local a = redis.call('HGET', ALIAS, id)
  if a then code, value = 2, a end
end
return {NOW, finish('m'), code, value}
