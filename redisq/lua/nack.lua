-- nack ends a current lease and makes its message due again after a delay, or a dead letter.
-- ARGV: the delivery configuration (4), ID, lease token, delay (ms), reason ('' for none), and
-- '1' to move the message to its dead letters at once ('0' otherwise).
-- Replies {NOW, ver, code, limited}: code 1 done, -1 the token names no current lease; limited the
-- topic when it has a limit, whose permit the caller gives back, or ''.
load_cfg(1)
local id, tok, delay, reason, dead = ARGV[5], ARGV[6], tonumber(ARGV[7]), ARGV[8], ARGV[9] == '1'
local rec = locate(id)
local code, lim = -1, ''
if rec then
  local r = parse(rec)
  if r.tok ~= '' and r.tok == tok and unlease(id, r.topic) then
    r.tok = ''
    local why = 'n'
    if dead then why = 'd' end
    if limited(r.topic) then lim = r.topic end
    tcount('n', r.topic, 1)
    fail(id, r, payload(rec, r), delay, why, reason)
    code = 1
  end
end
return {NOW, finish('m'), code, lim}
