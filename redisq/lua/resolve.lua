-- resolve settles an alias on the shard it names: is the aliased message here, put by the batch
-- with that token? ARGV: ID, batch token, mode ('check' or 'cancel'), then for 'check' the
-- requested due time (ms), topic and payload of a message being put under the ID.
-- Replies {NOW, ver, code, value}: 'same'/'dup' (value: due time) it is here and the message put
-- is/is not a retry of it; 'cancelled' (value: its aux) it was here and is removed; 'aborted' it is
-- not here, and the token is marked so that its batch can never be written.
local id, token, mode = ARGV[1], ARGV[2], ARGV[3]
local rec = locate(id)
if rec then
  local r = parse(rec)
  if r.aux ~= '' and string.match(r.aux, '%.(.*)$') == token then
    if mode == 'cancel' then
      remove(id, r)
      forget_failure(id, r)
      bury(id, r)
      return {NOW, finish('m'), 'cancelled', r.aux}
    end
    if same_put(rec, r, ARGV[5], ARGV[4], ARGV[6]) then
      return {NOW, finish('m'), 'same', fmt(r.due)}
    end
    return {NOW, finish('m'), 'dup', fmt(r.due)}
  end
end
redis.call('SET', P .. 'abort:' .. token, '1', 'EX', 3600)
return {NOW, finish('m'), 'aborted', ''}
