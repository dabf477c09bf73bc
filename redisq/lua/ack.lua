-- ack ends leases. ARGV: n, then for each receipt: message ID, lease token. Replies {NOW, ver,
-- code1, aux1, limited1, ...}: code 1 acked (aux: the alias to remove, or ''; limited: the topic
-- when it has a limit, whose permit the caller gives back, or ''), 0 no such message (done
-- already), -1 the message was leased under another token since.
local n = tonumber(ARGV[1])
local out = {NOW, 0}
-- The receipts are taken a thousand at a time: the records of a chunk are read, its messages'
-- leases looked up, and the records, leases and tombstones of those acked removed and added, with
-- one command each (HMGET, ZMSCORE, HDEL, ZREM, SADD), not one each per message, whose dispatch
-- from Lua cost more than what most of them do. acked holds the IDs acked by this script, so that
-- a receipt repeated finds its message done, as it would one receipt at a time.
local acked = {}
for c = 1, n, 1000 do
  local last = math.min(c + 999, n)
  local ids = {}
  for i = c, last do ids[#ids + 1] = ARGV[2 * i] end
  local recs = redis.call('HMGET', REC, unpack(ids))
  local inlease = redis.call('ZMSCORE', LEASE, unpack(ids))
  local dels, unl, ltopic, tombs = {}, {}, {}, {}
  for k, id in ipairs(ids) do
    local tok = ARGV[2 * (c + k - 1) + 1]
    local rec = recs[k]
    if acked[id] then rec = false end
    local code, aux, lim = 0, '', ''
    if rec then
      local r = parse_ack(rec)
      if r.tok ~= '' and r.tok == tok then
        acked[id] = true
        dels[#dels + 1] = id
        -- As remove does: its lease ends, or else it leaves its ready set or the wheel.
        if inlease[k] then
          unl[#unl + 1] = id
          local l = ltopic[r.topic]
          if not l then
            l = {}
            ltopic[r.topic] = l
          end
          l[#l + 1] = id
          D.leased = D.leased - 1
        elseif not unready(id, r.topic) then
          xdel(r.topic, r.due, id)
        end
        if r.origin ~= '' then redis.call('ZREM', dkey(r.origin), id) end
        forget_failure(id, r)
        tombs[#tombs + 1] = tomb(id, r)
        tcount('a', r.topic, 1)
        code, aux = 1, r.aux
        if limited(r.topic) then lim = r.topic end
      else
        code = -1
      end
    end
    out[#out + 1] = code
    out[#out + 1] = aux
    out[#out + 1] = lim
  end
  if #dels > 0 then redis.call('HDEL', REC, unpack(dels)) end
  if #unl > 0 then redis.call('ZREM', LEASE, unpack(unl)) end
  for topic, l in pairs(ltopic) do redis.call('ZREM', lkey(topic), unpack(l)) end
  bury_all(tombs)
end
out[2] = finish('m')
return out
