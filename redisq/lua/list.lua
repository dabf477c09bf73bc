-- list (read-only) returns a topic's messages in a state, in order after a position, without
-- changing anything. ARGV: state ('s' scheduled, 'd' due, 'l' leased, 'x' dead), topic, '1' when a
-- position follows ('0' for the start), its score (ms) and ID, the most entries n, and how many
-- bytes of each payload to return.
-- Entries are ordered by score, then ID byte by byte: scheduled messages (in the topic's wheel, and
-- ready ahead of their due time) by due time; due ones (the ready set up to NOW) by due time;
-- leased ones by lease deadline; dead letters of the topic by the time they died.
-- Replies {NOW, then per entry: ID, score, payload size, record with its payload cut (or '' when
-- the entry has no record: a set out of step, skipped by the engine), the reason of its last
-- failure ('' for none)}; fewer than n entries means there are no more.
local state, topic, hasc, cms, cid = ARGV[1], ARGV[2], ARGV[3] == '1', ARGV[4], ARGV[5]
local n, plen = tonumber(ARGV[6]), tonumber(ARGV[7])

local function start(z)
  if hasc then return after(z, cms, cid) end
  return 0
end

-- range appends to into the entries {id, score} of z from rank lo to hi (inclusive).
local function range(z, lo, hi, into)
  if hi < lo then return into end
  local kv = redis.call('ZRANGE', z, lo, hi, 'WITHSCORES')
  for i = 1, #kv, 2 do into[#into + 1] = {kv[i], kv[i + 1]} end
  return into
end

local entries = {}
if state == 's' then
  local z = rkey(topic)
  local lo = math.max(start(z), redis.call('ZCOUNT', z, '-inf', NOW))
  local early = range(z, lo, lo + n - 1, {})
  local wheel = {}
  local xi = xikey(topic)
  local b
  if hasc then b = xfloor(topic, xbound(cms, cid)) else b = redis.call('ZRANGE', xi, 0, 0)[1] end
  local first = true
  while b and #wheel < n do
    local k = xckey(topic, b)
    local r = 0
    if first and hasc then r = after(k, cms, cid) end
    first = false
    range(k, r, r + n - #wheel - 1, wheel)
    b = redis.call('ZRANGEBYLEX', xi, '(' .. b, '+', 'LIMIT', 0, 1)[1]
  end
  local i, j = 1, 1
  while #entries < n and (i <= #early or j <= #wheel) do
    local take
    if i > #early then
      take = false
    elseif j > #wheel then
      take = true
    else
      local a, w = tonumber(early[i][2]), tonumber(wheel[j][2])
      take = a < w or (a == w and bytes_lt(early[i][1], wheel[j][1]))
    end
    if take then
      entries[#entries + 1] = early[i]
      i = i + 1
    else
      entries[#entries + 1] = wheel[j]
      j = j + 1
    end
  end
elseif state == 'd' then
  local z = rkey(topic)
  local lo = start(z)
  range(z, lo, math.min(lo + n, redis.call('ZCOUNT', z, '-inf', NOW)) - 1, entries)
else
  local z
  if state == 'l' then z = lkey(topic) else z = dkey(topic) end
  local lo = start(z)
  range(z, lo, lo + n - 1, entries)
end

local out = {NOW}
for _, e in ipairs(entries) do
  local rec = locate(e[1])
  out[#out + 1] = e[1]
  out[#out + 1] = e[2]
  if rec then
    local r = parse(rec)
    out[#out + 1] = #rec - r.body + 1
    out[#out + 1] = string.sub(rec, 1, r.body - 1 + plen)
    if has_reason(r) then out[#out + 1] = redis.call('HGET', WHY, e[1]) or '' else out[#out + 1] = '' end
  else
    out[#out + 1] = 0
    out[#out + 1] = ''
    out[#out + 1] = ''
  end
end
return out
