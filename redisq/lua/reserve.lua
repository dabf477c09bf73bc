-- reserve writes the aliases of a batch's chosen IDs whose home is this shard, all or none.
-- ARGV: the alias ("<batch shard>.<batch token>"), n, then for each ID: ID, requested due time
-- (ms), topic, payload.
-- Replies {NOW, ver, code1, value1, ...}: 'ok' reserved, 'same' (value: due time) the message waits
-- here as put, 'dup' (value: its due time) another message waits here, 'alias' (value: the alias)
-- another batch holds it. Nothing is written unless every code is 'ok'.
local alias, n = ARGV[1], tonumber(ARGV[2])
local codes, vals, ok = {}, {}, true
for i = 1, n do
  local o = 2 + (i - 1) * 4
  local id, req, topic = ARGV[o + 1], ARGV[o + 2], ARGV[o + 3]
  local rec = locate(id)
  local c, v = 'ok', ''
  if rec then
    local r = parse(rec)
    if same_put(rec, r, topic, req, ARGV[o + 4]) then c = 'same' else c = 'dup' end
    v = fmt(r.due)
  else
    local a = redis.call('HGET', ALIAS, id)
    if a and a ~= alias then c, v = 'alias', a end
  end
  if c ~= 'ok' then ok = false end
  codes[i], vals[i] = c, v
end
if ok then
  for i = 1, n do redis.call('HSET', ALIAS, ARGV[2 + (i - 1) * 4 + 1], alias) end
end
local out = {NOW, finish('m')}
for i = 1, n do
  out[#out + 1] = codes[i]
  out[#out + 1] = vals[i]
end
return out
