-- requeue moves dead letters of a topic back onto it, due at once, their attempts counted from
-- zero. ARGV: the delivery configuration (4), topic, mode, then for mode 'ids': n and n IDs; for
-- mode 'all': budget, and the rank from which to go on scanning the leases of the dead-letter
-- topic.
-- Replies, for 'ids': {NOW, ver, code1, value1, ...}, code 1 moved, 0 not a dead letter of the
-- topic, 'alias' (value: the alias, to follow to its shard); for 'all': {NOW, ver, moved, done
-- (1 or 0), rank}: the dead letters that are not leased first, then those leased by consumers of
-- the dead-letter topic.
load_cfg(1)
local topic, mode = ARGV[5], ARGV[6]

local function requeue(id, rec)
  local r = parse(rec)
  if r.origin ~= topic then return false end
  remove(id, r)
  forget_failure(id, r)
  r.topic, r.origin, r.dead, r.att, r.tok, r.due = r.origin, '', '', 0, '', NOW
  place(id, r, payload(rec, r))
  return true
end

local out = {NOW, 0}
if mode == 'ids' then
  for i = 1, tonumber(ARGV[7]) do
    local id = ARGV[7 + i]
    local rec = locate(id)
    local code, value = 0, ''
    if rec then
      if requeue(id, rec) then code = 1 end
    else
      local a = redis.call('HGET', ALIAS, id)
      if a then code, value = 'alias', a end
    end
    out[#out + 1] = code
    out[#out + 1] = value
  end
else
  local budget, rank = tonumber(ARGV[7]), tonumber(ARGV[8])
  local moved, work = 0, 0
  for _, id in ipairs(redis.call('ZRANGE', dkey(topic), 0, budget - 1)) do
    work = work + 1
    local rec = locate(id)
    if rec and requeue(id, rec) then
      moved = moved + 1
    else
      redis.call('ZREM', dkey(topic), id)
    end
  end
  local done = 0
  if work < budget then
    local want = budget - work
    local ids = redis.call('ZRANGE', lkey(dead_topic(topic)), rank, rank + want - 1)
    for _, id in ipairs(ids) do
      local rec = locate(id)
      if rec and requeue(id, rec) then moved = moved + 1 else rank = rank + 1 end
    end
    if #ids < want then done = 1 end
  end
  out[3], out[4], out[5] = moved, done, rank
end
out[2] = finish('m')
return out
