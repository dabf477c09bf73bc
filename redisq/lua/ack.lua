-- ack ends leases. ARGV: n, then for each receipt: message ID, lease token. Replies {NOW, ver,
-- code1, aux1, limited1, ...}: code 1 acked (aux: the alias to remove, or ''; limited: the topic
-- when it has a limit, whose permit the caller gives back, or ''), 0 no such message (done
-- already), -1 the message was leased under another token since.
local n = tonumber(ARGV[1])
local out = {NOW, 0}
for i = 1, n do
  local o = 1 + (i - 1) * 2
  local id, tok = ARGV[o + 1], ARGV[o + 2]
  local rec = locate(id)
  local code, aux, lim = 0, '', ''
  if rec then
    local r = parse(rec)
    if r.tok ~= '' and r.tok == tok then
      remove(id, r)
      forget_failure(id, r)
      bury(id, r)
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
out[2] = finish('m')
return out
