-- unalias removes an alias if it still has the given value. ARGV: ID, alias.
-- Replies {NOW, ver, 1} when removed, {NOW, ver, 0} otherwise.
local code = 0
if redis.call('HGET', ALIAS, ARGV[1]) == ARGV[2] then
  redis.call('HDEL', ALIAS, ARGV[1])
  code = 1
end
return {NOW, finish('m'), code}
