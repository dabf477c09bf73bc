-- receive promotes what is due and expires due leases (HK messages at most each), then leases up
-- to max due messages of a topic unless the topic is paused, or limited and the caller holds no
-- permits (see permit). ARGV: the delivery configuration (4, see load_cfg), topic, max (0: only
-- report; at most 4096), visibility (ms), '1' when the caller holds max permits of the topic's
-- limit, then max lease tokens (the permits' tokens) if it does, and otherwise the random base of
-- the lease tokens, 14 characters of base64url, to which each lease's rank in the script adds two
-- (a token is 16 characters: 12 bytes, as receipts carry it).
-- Replies {NOW, ver, head, wsec, wcount, lms, more, id1, record1, ...}: head is the topic's next
-- due time (-1: none, or the topic is paused; -2: the topic is limited: ask for permits first),
-- wsec/wcount/lms the shard's next events (see
-- next_events), more 1 when the housekeeping left work behind; then each leased message with its
-- new record.
local HK = 100
load_cfg(1)
local topic, max, vis, permitted = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8] == '1'
if not permitted and (max > 4096 or #ARGV[9] ~= 14) then
  return redis.error_reply('ERR receive: max ' .. max .. ' and a token base of ' .. #ARGV[9] .. ' characters')
end
local B64 = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_'
-- token returns the lease token of the i-th message leased.
local function token(i)
  if permitted then return ARGV[8 + i] end
  local hi, lo = math.floor((i - 1) / 64) + 1, (i - 1) % 64 + 1
  return ARGV[9] .. string.sub(B64, hi, hi) .. string.sub(B64, lo, lo)
end
local moved = promote(0, HK)
local expired = expire(HK)
local more = 0
if moved >= HK or expired >= HK then more = 1 end
-- out is the reply: its first 7 values are set last, and each message leased is added after them as
-- it is leased, not copied there from a table of its own.
local out = {0, 0, 0, 0, 0, 0, 0}
local n = 0
local stopped = paused(topic)
local unpermitted = not stopped and not permitted and limited(topic)
if unpermitted then stopped = true end
local rest -- the ready set's first member and score after the leases, once they are taken
if max > 0 and not stopped then
  local ids = redis.call('ZRANGEBYSCORE', rkey(topic), '-inf', NOW, 'LIMIT', 0, max)
  if #ids > 0 then
    local deadline = NOW + vis
    local lh = redis.call('ZRANGE', LEASE, 0, 0, 'WITHSCORES')
    if not lh[1] or deadline < tonumber(lh[2]) then EL = deadline end
    -- The records are read, written and the leases added with one command each for all the
    -- messages (max is at most 1000), not one each per message: a command's dispatch from Lua
    -- costs more than what most of them do, and the deadline is formatted once.
    if #ids >= SPREADN then spread_hash(REC) end
    local recs = redis.call('HMGET', REC, unpack(ids))
    local dl = fmt(deadline)
    local hs, zs = {}, {}
    for i, id in ipairs(ids) do
      local rec = recs[i]
      if rec then
        local dead
        rec, dead = leased(rec, token(i))
        hs[#hs + 1] = id
        hs[#hs + 1] = rec
        zs[#zs + 1] = dl
        zs[#zs + 1] = id
        if dead then redis.call('ZREM', dkey(parse(rec).origin), id) end
        D.leased = D.leased + 1
        n = n + 1
        out[6 + 2 * n] = id
        out[7 + 2 * n] = rec
      end
    end
    if #hs > 0 then
      redis.call('HSET', REC, unpack(hs))
      zadd_all(LEASE, zs)
      zadd_all(lkey(topic), zs)
    end
    tcount('v', topic, n)
    -- ids are the set's first #ids members, and nothing above changed the set: removed by rank,
    -- not each by name.
    redis.call('ZREMRANGEBYRANK', rkey(topic), 0, #ids - 1)
    D.ready = D.ready - #ids
    rest = redis.call('ZRANGE', rkey(topic), 0, 0, 'WITHSCORES')
    if not rest[1] then redis.call('SREM', TOPICS, topic) end
  end
end
local head = -1
if unpermitted then head = -2 end
if not stopped then
  local h = rest or redis.call('ZRANGE', rkey(topic), 0, 0, 'WITHSCORES')
  if h[1] then head = tonumber(h[2]) end
end
local wsec, wcount, lms = next_events()
out[1], out[2], out[3], out[4], out[5], out[6], out[7] = NOW, finish('m'), head, wsec, wcount, lms, more
return out
