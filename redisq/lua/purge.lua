-- purge removes, as if cancelled, up to budget messages of a topic in a state. ARGV: topic, state
-- ('s' scheduled, 'd' due, 'x' dead), budget. Replies {NOW, ver, removed, done (1 when no more are
-- left)}. Index or set entries without a record (out of step) are dropped and count in the budget.
local topic, state, budget = ARGV[1], ARGV[2], tonumber(ARGV[3])
local removed, work = 0, 0

local function drop(id, rec)
  local r = parse(rec)
  remove(id, r)
  forget_failure(id, r)
  bury(id, r)
  removed = removed + 1
end

local function drop_ready(ids)
  for _, id in ipairs(ids) do
    work = work + 1
    local rec = locate(id)
    if rec then
      drop(id, rec)
    else
      unready(id, topic)
    end
  end
end

if state == 's' then
  drop_ready(redis.call('ZRANGEBYSCORE', rkey(topic), '(' .. fmt(NOW), '+inf', 'LIMIT', 0, budget))
  local xi = xikey(topic)
  while work < budget do
    local b = redis.call('ZRANGE', xi, 0, 0)[1]
    if not b then break end
    local kv = redis.call('ZRANGE', xckey(topic, b), 0, budget - work - 1, 'WITHSCORES')
    if #kv == 0 then break end
    for i = 1, #kv, 2 do
      work = work + 1
      local id, ms = kv[i], tonumber(kv[i + 1])
      local rec = locate(id)
      if rec then
        drop(id, rec)
      else
        xdel(topic, ms, id)
      end
    end
  end
elseif state == 'd' then
  drop_ready(redis.call('ZRANGEBYSCORE', rkey(topic), '-inf', NOW, 'LIMIT', 0, budget))
else
  for _, id in ipairs(redis.call('ZRANGE', dkey(topic), 0, budget - 1)) do
    work = work + 1
    local rec = locate(id)
    if rec then
      drop(id, rec)
    else
      redis.call('ZREM', dkey(topic), id)
    end
  end
end
local done = 0
if work < budget then done = 1 end
return {NOW, finish('m'), removed, done}
