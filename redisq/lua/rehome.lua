-- rehome sets the aux field of records, for the upgrade from layout version 2 or 3 (see rehome.go).
-- ARGV: n, then for each: ID, the aux the record must have, the aux to give it.
-- Replies {NOW, ver, code1, ...}: 1 set (or had it already), 0 no record with the ID and that aux.
local n = tonumber(ARGV[1])
local out = {NOW, 0}
for i = 1, n do
  local id, had, want = ARGV[3 * i - 1], ARGV[3 * i], ARGV[3 * i + 1]
  local rec = redis.call('HGET', REC, id)
  local code = 0
  if rec then
    local r = parse(rec)
    if r.aux == want then
      code = 1
    elseif r.aux == had then
      r.aux = want
      redis.call('HSET', REC, id, encode(r, payload(rec, r)))
      code = 1
    end
  end
  out[#out + 1] = code
end
out[2] = finish('m')
return out
