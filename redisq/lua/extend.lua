-- extend moves the deadlines of current leases, each to its visibility from the script's clock.
-- ARGV: n, then for each lease: message ID, lease token, visibility (ms). A lease whose deadline
-- has passed has run out, even before a script expired it.
-- Replies {NOW, ver, code1, limited1, ...}: code 1 extended, -1 the token names no current lease;
-- limited the topic when it has a limit, whose permit the caller extends too, or ''.
local n = tonumber(ARGV[1])
local out = {NOW, 0}
for i = 1, n do
  local o = 2 + (i - 1) * 3
  local id, tok, vis = ARGV[o], ARGV[o + 1], tonumber(ARGV[o + 2])
  local rec = locate(id)
  local code, lim = -1, ''
  if rec then
    local r = parse(rec)
    local d = tonumber(redis.call('ZSCORE', LEASE, id))
    if r.tok ~= '' and r.tok == tok and d and d > NOW then
      local deadline = NOW + vis
      if deadline > MAXMS then deadline = MAXMS end
      if deadline < d then
        local lh = redis.call('ZRANGE', LEASE, 0, 0, 'WITHSCORES')
        if deadline < tonumber(lh[2]) then EL = deadline end
      end
      redis.call('ZADD', LEASE, deadline, id)
      redis.call('ZADD', lkey(r.topic), deadline, id)
      code = 1
      if limited(r.topic) then lim = r.topic end
    end
  end
  out[#out + 1] = code
  out[#out + 1] = lim
end
out[2] = finish('m')
return out
