-- extend moves the deadline of a current lease to vis ms from the script's clock. ARGV: ID, lease
-- token, vis (ms). A lease whose deadline has passed has run out, even before a script expired it.
-- Replies {NOW, ver, code, limited}: code 1 extended, -1 the token names no current lease; limited
-- the topic when it has a limit, whose permit the caller extends too, or ''.
local id, tok, vis = ARGV[1], ARGV[2], tonumber(ARGV[3])
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
return {NOW, finish('m'), code, lim}
