-- delivernow makes a scheduled message due at once. ARGV: ID.
-- Replies {NOW, ver, code, value}: 1 done, 0 no scheduled message has the ID (it is due, leased, a
-- dead letter, or not waiting), 'alias' (value: the alias, to follow to its shard).
local id = ARGV[1]
local rec = locate(id)
local code, value = 0, ''
if rec then
  local r = parse(rec)
  local s = state(id, r.topic)
  if r.origin == '' and (s == 's' or (s == 'r' and r.due > NOW)) then
    remove(id, r)
    if r.req == '' then r.req = fmt(r.due) end
    r.due = NOW
    place(id, r, payload(rec, r))
    code = 1
  end
else
  local a = redis.call('HGET', ALIAS, id)
  if a then code, value = 'alias', a end
end
return {NOW, finish('m'), code, value}
