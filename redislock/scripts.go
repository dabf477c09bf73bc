package redislock

import (
	"fmt"

	"github.com/redis/go-redis/v9"
)

// The Lua scripts below are the whole protocol: any client that runs them (or equivalent
// MULTI/EXEC-free logic inside a script) on the keys described in the package doc interoperates
// with this package. Their sources are frozen wire format; change them only together with the
// package doc.

// acquireSrc takes the lock or adds a hold of its current owner.
//
//	KEYS[1] lock key    KEYS[2] fence key
//	ARGV[1] owner       ARGV[2] hold field    ARGV[3] lease in milliseconds
//
// Returns {1, token, replicas} when the caller holds the lock afterwards, and {0, pttl, replicas}
// with the holder's remaining time to live in milliseconds when another owner holds it; replicas
// is the number of replicas connected to this master and in sync, whom the caller may WAIT for.
// Running it twice with the same hold field (a client retrying after a lost reply) has the effect
// of running it once.
//
// The fencing token: a name's first token is Redis's clock in microseconds (TIME); the next is one
// more than the last, as long as the master that issued the last one has run since without a
// break. The fence key records that as epoch, the master's replication ID (INFO), which Redis
// changes whenever a master restarts or a replica is promoted; a master that finds another epoch
// there cannot know whether it lost the last acquisitions of the old one, so it jumps a million
// tokens ahead, or to its clock if that is further. Tokens stay below
// 2^53, which Lua's numbers hold exactly, until the year 2255.
const acquireSrc = `
local owner = redis.call('HGET', KEYS[1], 'owner')
if owner and owner ~= ARGV[1] then
  return {0, redis.call('PTTL', KEYS[1]), 0}
end
local repl = redis.call('INFO', 'replication')
local replicas = 0
for _ in string.gmatch(repl, 'state=online') do
  replicas = replicas + 1
end
if not owner then
  local epoch = string.match(repl, 'master_replid:(%x+)')
  local fence = redis.call('HMGET', KEYS[2], 'last', 'epoch')
  local last = tonumber(fence[1])
  local token
  if last and fence[2] == epoch then
    token = last + 1
  else
    local now = redis.call('TIME')
    token = tonumber(now[1]) * 1000000 + tonumber(now[2])
    if last and last + 1000000 > token then
      token = last + 1000000
    end
  end
  token = string.format('%d', token)
  redis.call('HSET', KEYS[2], 'last', token, 'epoch', epoch)
  redis.call('HSET', KEYS[1], 'owner', ARGV[1], 'token', token, 'count', 1, ARGV[2], 1)
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
  return {1, tonumber(token), replicas}
end
if redis.call('HSETNX', KEYS[1], ARGV[2], 1) == 1 then
  redis.call('HINCRBY', KEYS[1], 'count', 1)
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl >= 0 and ttl < tonumber(ARGV[3]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[3])
end
return {1, tonumber(redis.call('HGET', KEYS[1], 'token')), replicas}
`

// releaseSrc removes one hold; removing the last one deletes the lock, records its token as cleanly
// released in the fence key and publishes the token on the release channel.
//
//	KEYS[1] lock key    KEYS[2] fence key
//	ARGV[1] token       ARGV[2] hold field    ARGV[3] release channel    ARGV[4] owner
//
// The owner is checked as well as the token because tokens start again from 1 when Redis loses the
// fence key: an acquisition from before must not take a new one with its token for its own.
//
// Returns 1 when the hold was removed and others remain, 0 when the lock was freed, 2 when the hold
// had already been removed (a retry) and the lock is still held by that acquisition, 3 when that
// acquisition had already been released (a retry), and -1 when the lock is not held by that
// acquisition: it expired or was deleted.
const releaseSrc = `
local h = redis.call('HMGET', KEYS[1], 'token', 'owner')
if h[1] == ARGV[1] and h[2] == ARGV[4] then
  if redis.call('HDEL', KEYS[1], ARGV[2]) == 0 then
    return 2
  end
  if redis.call('HINCRBY', KEYS[1], 'count', -1) > 0 then
    return 1
  end
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[2], 'released', ARGV[1])
  redis.call('PUBLISH', ARGV[3], ARGV[1])
  return 0
end
if redis.call('HGET', KEYS[2], 'released') == ARGV[1] then
  return 3
end
return -1
`

// renewSrc extends the lease of every lock in KEYS still held by the acquisition named by its token
// and owner. The owner is checked as well because tokens start again from 1 when Redis loses the
// fence key (a restart without persistence): a new acquisition may then have the token of one from
// before, whose holder must not renew it. Like acquireSrc, it only ever extends a lease: the owner may
// also hold the lock with a longer fixed lease (WithLease), which a renewal must not cut short.
//
//	KEYS[i] lock key    ARGV[1] lease in milliseconds
//	ARGV[2i] token of KEYS[i]    ARGV[2i+1] owner of KEYS[i]
//
// Returns an array with, for each key, 1 if it was renewed and 0 if it is gone or held by another
// acquisition. A key of another type counts as gone rather than failing the batch.
//
// In Redis Cluster all KEYS of a call must share a hash slot; renewNodeSrc renews the locks of
// every slot of a master in one call.
const renewSrc = `
local out = {}
for i = 1, #KEYS do
  local h = redis.pcall('HMGET', KEYS[i], 'token', 'owner')
  if h[1] == ARGV[2 * i] and h[2] == ARGV[2 * i + 1] then
    if redis.call('PTTL', KEYS[i]) < tonumber(ARGV[1]) then
      redis.call('PEXPIRE', KEYS[i], ARGV[1])
    end
    out[i] = 1
  else
    out[i] = 0
  end
end
return out
`

// renewNodeSrc does what renewSrc does for locks of any slots that one master serves: its keys are
// passed in ARGV rather than KEYS, which Redis Cluster allows (Redis 7 or later) to a script that
// declares allow-cross-slot-keys, as long as every key it touches is served by the master it runs
// on.
//
//	ARGV[1] lease in milliseconds
//	ARGV[3i-1] lock key i    ARGV[3i] its token    ARGV[3i+1] its owner
//
// Returns an array with, for each key, 1 if it was renewed, 0 if it is gone, held by another
// acquisition or of another type, and -1 if it could not be read here (the master does not serve
// its slot any more, or the cluster is down), and then the number of replicas connected to this
// master and in sync.
const renewNodeSrc = `#!lua flags=allow-cross-slot-keys
local out = {}
local lease = tonumber(ARGV[1])
for i = 2, #ARGV, 3 do
  local h = redis.pcall('HMGET', ARGV[i], 'token', 'owner')
  if h.err then
    if string.find(h.err, '^WRONGTYPE') then
      out[#out + 1] = 0
    else
      out[#out + 1] = -1
    end
  elseif h[1] == ARGV[i + 1] and h[2] == ARGV[i + 2] then
    if redis.call('PTTL', ARGV[i]) < lease then
      redis.call('PEXPIRE', ARGV[i], ARGV[1])
    end
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
local replicas = 0
for _ in string.gmatch(redis.call('INFO', 'replication'), 'state=online') do
  replicas = replicas + 1
end
out[#out + 1] = replicas
return out
`

var (
	acquireScript   = redis.NewScript(acquireSrc)
	releaseScript   = redis.NewScript(releaseSrc)
	renewScript     = redis.NewScript(renewSrc)
	renewNodeScript = redis.NewScript(renewNodeSrc)
)

// Results of releaseSrc.
const (
	releasedHold  = 1
	releasedLock  = 0
	releasedRetry = 2
	releasedEarly = 3
	releaseGone   = -1
)

// parseAcquire decodes the reply of acquireSrc.
func parseAcquire(v any) (acquired bool, n int64, replicas int, err error) {
	a, ok := v.([]any)
	if !ok || len(a) != 3 {
		return false, 0, 0, fmt.Errorf("%w: acquire script replied %v", ErrProtocol, v)
	}
	flag, ok1 := a[0].(int64)
	n, ok2 := a[1].(int64)
	r, ok3 := a[2].(int64)
	if !ok1 || !ok2 || !ok3 || (flag != 0 && flag != 1) || r < 0 {
		return false, 0, 0, fmt.Errorf("%w: acquire script replied %v", ErrProtocol, v)
	}
	return flag == 1, n, int(r), nil
}

// parseRenew decodes the reply of renewSrc for a batch of n keys.
func parseRenew(v any, n int) ([]bool, error) {
	a, ok := v.([]any)
	if !ok || len(a) != n {
		return nil, fmt.Errorf("%w: renew script replied %v for %d keys", ErrProtocol, v, n)
	}
	out := make([]bool, n)
	for i, x := range a {
		f, ok := x.(int64)
		if !ok || (f != 0 && f != 1) {
			return nil, fmt.Errorf("%w: renew script replied %v", ErrProtocol, v)
		}
		out[i] = f == 1
	}
	return out, nil
}

// Results of renewNodeSrc per key.
const (
	renewedKey   = 1
	goneKey      = 0
	elsewhereKey = -1
)

// parseRenewNode decodes the reply of renewNodeSrc for n keys.
func parseRenewNode(v any, n int) (results []int, replicas int, err error) {
	a, ok := v.([]any)
	if !ok || len(a) != n+1 {
		return nil, 0, fmt.Errorf("%w: renew script replied %v for %d keys", ErrProtocol, v, n)
	}
	results = make([]int, n)
	for i, x := range a[:n] {
		f, ok := x.(int64)
		if !ok || f < elsewhereKey || f > renewedKey {
			return nil, 0, fmt.Errorf("%w: renew script replied %v", ErrProtocol, v)
		}
		results[i] = int(f)
	}
	r, ok := a[n].(int64)
	if !ok || r < 0 {
		return nil, 0, fmt.Errorf("%w: renew script replied %v", ErrProtocol, v)
	}
	return results, int(r), nil
}
