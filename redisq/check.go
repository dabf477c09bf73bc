package redisq

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A CheckReport is what [Check] found in a deployment.
type CheckReport struct {
	Prefix   string   // the deployment's name
	Shards   int      // its shard count
	Messages int      // the waiting messages its shards hold (their records)
	Problems []string // the first broken invariant of each shard that has one, "shard 3: ..."; none when sound
}

// checkPause bounds how long Check pauses the writes of a shard's master while it reads the
// shard: Redis lifts the pause by itself then, should Check die holding it.
const checkPause = 10 * time.Second

// Check verifies the layout of the deployment prefix in rdb (see the package doc): it reads every
// key of every shard and checks the invariants the scripts keep, as redisq's own tests do after
// each step:
//
//   - each message's record is in exactly one place: its topic's wheel, its topic's ready set, or
//     the leases (and its topic's leases), at its due time or lease deadline, and nothing else is;
//   - each topic's wheel is in chunks of 1 to 128 entries (listpacks, unless an ID is over 64
//     bytes) whose bounds are in order and cover their entries, the first "", and xt scores the
//     topic by its first entry;
//   - sc counts the wheel's entries of each second, and secs holds the seconds it counts;
//   - the dead-letter sets hold exactly the dead letters that are not leased, at their death;
//   - the shard's and the topics' counters match what they count, and topics names the topics
//     with ready messages;
//   - every record decodes, and the headers of those that have some are a JSON object of headers
//     the engine would take;
//   - why holds a reason for exactly the records whose fail kind says they have one;
//   - each shard that holds messages carries the stamp of the deployment's configuration;
//   - every schedule's record decodes and names a valid schedule homed in its shard; snames
//     holds exactly their names, sact exactly the running ones, and the counters schn and schp
//     count them; every message whose ID is of a fire's form lives in the home shard of the
//     schedule's name, or has an aux naming that shard (an alias there).
//   - every shard holds the same delivery limits, each one that queue.Limit.Check keeps as it
//     is, and a limited topic's bucket (tok from 0 to its burst, ts) and permits (lease tokens
//     scored by deadlines) are on its home shard only, and only while it has a limit.
//
// It changes nothing, but it pauses the writes of each shard's master (CLIENT PAUSE WRITE) while
// it reads that shard, for at most 10 s, so that no script changes the shard halfway through the
// check: the processes serving the deployment wait meanwhile. A shard too large to read in 10 s
// may show problems that are writes made during the check; check it again, or while no process
// serves the deployment. The Redis user needs the CLIENT PAUSE command.
//
// Problems found are in the report; the error is for what kept Check from looking: Redis
// unreachable (matching [ErrUnavailable]), no deployment of that prefix ([ErrNotFound]), or one
// of a layout version this package does not read ([ErrIncompatible]).
func Check(ctx context.Context, rdb redis.UniversalClient, prefix string) (*CheckReport, error) {
	if err := validPrefix(prefix); err != nil {
		return nil, fmt.Errorf("%w: check: prefix %v", ErrInvalid, err)
	}
	key := "{" + prefix + "}:config"
	v, err := rdb.HMGet(ctx, key, "version", "shards", "secret").Result()
	if err != nil {
		return nil, fmt.Errorf("redisq: check: %w", unavailable(err))
	}
	version, _ := v[0].(string)
	shardsText, _ := v[1].(string)
	secretText, _ := v[2].(string)
	if version == "" {
		return nil, fmt.Errorf("redisq: check: no deployment %q in this Redis (no %s): %w", prefix, key, ErrNotFound)
	}
	if version != layoutVersion {
		what := ""
		if slices.Contains(upgradable, version) {
			what = " (Open upgrades it in place: check it after)"
		}
		return nil, fmt.Errorf("%w: check: deployment %q has layout version %s; this version of redisq reads only layout version %s%s",
			ErrIncompatible, prefix, version, layoutVersion, what)
	}
	shards, err := strconv.Atoi(shardsText)
	secret, err2 := hex.DecodeString(secretText)
	if err != nil || err2 != nil || shards < 1 || shards > MaxShards || len(secret) < 16 {
		return nil, fmt.Errorf("%w: configuration of %q is %v", ErrProtocol, prefix, v[:2])
	}
	stamp := stampOf(secret)
	lay := newLayout(prefix, shards)
	rep := &CheckReport{Prefix: prefix, Shards: shards}
	limits := make([]shardLimits, shards)
	for s := range shards {
		node, err := masterOf(ctx, rdb, lay.metaKey(s))
		if err != nil {
			return nil, fmt.Errorf("redisq: check: shard %d: %w", s, unavailable(err))
		}
		n, sl, err := checkPaused(ctx, node, lay, s)
		limits[s] = sl
		if err == nil {
			switch dep, derr := node.HGet(ctx, lay.metaKey(s), "dep").Result(); {
			case derr == redis.Nil && n > 0:
				err = broken("no deployment stamp in its meta, though it holds messages")
			case derr == redis.Nil:
				// A shard never used since its Redis lost its data; a process stamps it at its
				// next script.
			case derr != nil:
				err = derr
			case dep != stamp:
				err = broken("stamped %s, not the configuration's %s: it belongs to a configuration made before", dep, stamp)
			}
		}
		var ce checkError
		switch {
		case errors.As(err, &ce):
			rep.Problems = append(rep.Problems, fmt.Sprintf("shard %d: %v", s, err))
		case err != nil:
			return nil, fmt.Errorf("redisq: check: shard %d: %w", s, unavailable(err))
		}
		rep.Messages += n
	}
	rep.Problems = append(rep.Problems, checkLimitsAcross(lay, limits)...)
	return rep, nil
}

// masterOf returns the client of the master that serves key: rdb itself unless it is a cluster
// client.
func masterOf(ctx context.Context, rdb redis.UniversalClient, key string) (*redis.Client, error) {
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	case *redis.Client:
		return c, nil
	}
	return nil, fmt.Errorf("%w: check: client of type %T; want a *redis.Client or a *redis.ClusterClient", ErrInvalid, rdb)
}

// checkPaused checks shard s on node while node's writes are paused, and returns what it holds
// of the limits (see checkLimitsAcross).
func checkPaused(ctx context.Context, node *redis.Client, lay *layout, s int) (int, shardLimits, error) {
	if err := node.Do(ctx, "CLIENT", "PAUSE", checkPause.Milliseconds(), "WRITE").Err(); err != nil {
		return 0, shardLimits{}, err
	}
	n, err := checkShard(ctx, node, lay, s)
	var sl shardLimits
	if err == nil {
		sl, err = checkShardLimits(ctx, node, lay, s)
	}
	if uerr := node.Do(context.WithoutCancel(ctx), "CLIENT", "UNPAUSE").Err(); uerr != nil && err == nil {
		err = uerr
	}
	return n, sl, err
}

// A checkError is a broken invariant, as opposed to a failure to read.
type checkError struct{ msg string }

func (e checkError) Error() string { return e.msg }

// broken returns a checkError.
func broken(format string, args ...any) error { return checkError{fmt.Sprintf(format, args...)} }

// scanKeys returns the keys of rdb that start with p, with SCAN (KEYS would hold the server for
// the whole keyspace at once), each once: SCAN may return a key more than once.
func scanKeys(ctx context.Context, rdb *redis.Client, p string) ([]string, error) {
	seen := map[string]bool{}
	var keys []string
	var cursor uint64
	for {
		ks, next, err := rdb.Scan(ctx, cursor, globEscape(p)+"*", 1000).Result()
		if err != nil {
			return nil, err
		}
		for _, k := range ks {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		if cursor = next; cursor == 0 {
			return keys, nil
		}
	}
}

// globEscape escapes the characters that a SCAN MATCH pattern gives a meaning.
func globEscape(s string) string {
	var b strings.Builder
	for _, c := range []byte(s) {
		switch c {
		case '*', '?', '[', ']', '\\':
			b.WriteByte('\\')
		}
		b.WriteByte(c)
	}
	return b.String()
}

// checkShard checks the keys of shard s of lay on rdb, the shard's master, and returns how many
// records it holds and the first broken invariant found, or nil.
func checkShard(ctx context.Context, rdb *redis.Client, lay *layout, s int) (int, error) {
	p := "{" + lay.tags[s] + "}:"
	keys, err := scanKeys(ctx, rdb, p)
	if err != nil {
		return 0, err
	}
	raw, err := rdb.HGetAll(ctx, p+"rec").Result()
	if err != nil {
		return 0, err
	}
	recs := make(map[string]record, len(raw))
	for id, r := range raw {
		rec, err := decodeRecord(r)
		if err != nil {
			return 0, broken("record of %q: %v", id, err)
		}
		recs[id] = rec
	}
	why, err := rdb.HGetAll(ctx, p+"why").Result()
	if err != nil {
		return 0, err
	}
	for id, rec := range recs {
		if _, ok := why[id]; ok != (rec.failWhy == 'N' || rec.failWhy == 'D') {
			return 0, broken("%q failed as %q, with a reason in why: %v", id, rec.failWhy, ok)
		}
		delete(why, id)
	}
	if len(why) > 0 {
		return 0, broken("why holds reasons of messages without a record: %v", why)
	}
	place := make(map[string]string) // ID -> where it was found
	found := func(id, where string, topic string, score float64, due bool) error {
		rec, ok := recs[id]
		switch {
		case !ok:
			return broken("%s has %q, which has no record", where, id)
		case place[id] != "":
			return broken("%q is in %s and in %s", id, place[id], where)
		case rec.topic != topic:
			return broken("%q of topic %q is in %s", id, rec.topic, where)
		case due && float64(rec.due) != score:
			return broken("%q due at %d is in %s at %v", id, rec.due, where, score)
		}
		place[id] = where
		return nil
	}
	ready, wheel := int64(0), int64(0)
	readyTopics := map[string]bool{}
	perTopic := map[string]int64{}
	perSec := map[string]int64{}
	heads := map[string]float64{}
	chunkKeys := map[string]bool{}
	var indexes []string
	for _, k := range keys {
		name := strings.TrimPrefix(k, p)
		switch {
		case strings.HasPrefix(name, "r:"):
			topic := strings.TrimPrefix(name, "r:")
			readyTopics[topic] = true
			zs, _ := rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
			for _, z := range zs {
				if err := found(z.Member.(string), "the ready set of "+topic, topic, z.Score, true); err != nil {
					return 0, err
				}
				ready++
			}
		case strings.HasPrefix(name, "xi:"):
			indexes = append(indexes, strings.TrimPrefix(name, "xi:"))
		case strings.HasPrefix(name, "xc:"):
			chunkKeys[k] = true
		}
	}
	leases, err := rdb.ZRangeWithScores(ctx, p+"lease", 0, -1).Result()
	if err != nil {
		return 0, err
	}
	leased := map[string]float64{}
	for _, z := range leases {
		id := z.Member.(string)
		topic := recs[id].topic
		if err := found(id, "the leases", topic, 0, false); err != nil {
			return 0, err
		}
		leased[id] = z.Score
		if sc, err := rdb.ZScore(ctx, p+"l:"+topic, id).Result(); err != nil || sc != z.Score {
			return 0, broken("lease of %q (deadline %v) is not in its topic %q's leases: %v, %v", id, z.Score, topic, sc, err)
		}
	}
	for _, topic := range indexes {
		bounds, err := rdb.ZRange(ctx, p+"xi:"+topic, 0, -1).Result()
		if err != nil {
			return 0, err
		}
		if len(bounds) == 0 || bounds[0] != "" {
			return 0, broken("wheel of %q has bounds %q: want the first empty", topic, bounds)
		}
		for i, b := range bounds {
			k := lay.chunkKey(s, topic, b)
			delete(chunkKeys, k)
			zs, err := rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
			if err != nil {
				return 0, err
			}
			if len(zs) == 0 || len(zs) > 128 {
				return 0, broken("chunk %q of %q has %d entries", b, topic, len(zs))
			}
			long := false
			for _, z := range zs {
				long = long || len(z.Member.(string)) > 64
			}
			if enc, _ := rdb.ObjectEncoding(ctx, k).Result(); enc != "listpack" && !long {
				return 0, broken("chunk %q of %q is a %s", b, topic, enc)
			}
			if i == 0 {
				heads[topic] = zs[0].Score
			}
			for _, z := range zs {
				id := z.Member.(string)
				eb := fmt.Sprintf("%014d%s", int64(z.Score), id)
				if eb < b || (i+1 < len(bounds) && eb >= bounds[i+1]) {
					return 0, broken("entry %q of %q in the chunk bounded by %q (next %q)", eb, topic, b, bounds[min(i+1, len(bounds)-1)])
				}
				if err := found(id, "the wheel of "+topic, topic, z.Score, true); err != nil {
					return 0, err
				}
				wheel++
				perTopic[topic]++
				perSec[strconv.FormatInt(int64(z.Score)/1000, 10)]++
			}
		}
	}
	if len(chunkKeys) > 0 {
		return 0, broken("chunks outside any wheel: %v", chunkKeys)
	}
	for id := range recs {
		if place[id] == "" {
			return 0, broken("%q has a record and is nowhere", id)
		}
	}
	// The topics' heads, and the counts of the seconds.
	xt, err := rdb.ZRangeWithScores(ctx, p+"xt", 0, -1).Result()
	if err != nil {
		return 0, err
	}
	for _, z := range xt {
		topic := z.Member.(string)
		if h, ok := heads[topic]; !ok || h != z.Score {
			return 0, broken("xt scores %q at %v; its first entry is at %v (present %v)", topic, z.Score, h, ok)
		}
		delete(heads, topic)
	}
	if len(heads) > 0 {
		return 0, broken("topics with a wheel and not in xt: %v", heads)
	}
	sc, err := rdb.HGetAll(ctx, p+"sc").Result()
	if err != nil {
		return 0, err
	}
	for sec, v := range sc {
		if n, _ := strconv.ParseInt(v, 10, 64); n != perSec[sec] {
			return 0, broken("sc counts %s for second %s; the wheel has %d", v, sec, perSec[sec])
		}
		delete(perSec, sec)
	}
	if len(perSec) > 0 {
		return 0, broken("seconds of the wheel that sc does not count: %v", perSec)
	}
	secs, err := rdb.ZRange(ctx, p+"secs", 0, -1).Result()
	if err != nil {
		return 0, err
	}
	for _, sec := range secs {
		if _, ok := sc[sec]; !ok {
			return 0, broken("secs has %s, which sc does not count", sec)
		}
	}
	if len(secs) != len(sc) {
		return 0, broken("secs has %d seconds, sc %d", len(secs), len(sc))
	}
	// Per-topic leases and dead letters.
	for _, k := range keys {
		name := strings.TrimPrefix(k, p)
		switch {
		case strings.HasPrefix(name, "l:"):
			topic := strings.TrimPrefix(name, "l:")
			zs, _ := rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
			for _, z := range zs {
				id := z.Member.(string)
				if leased[id] != z.Score || recs[id].topic != topic {
					return 0, broken("%q in the leases of %q is not leased there", id, topic)
				}
			}
		case strings.HasPrefix(name, "d:"):
			origin := strings.TrimPrefix(name, "d:")
			zs, _ := rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
			for _, z := range zs {
				id := z.Member.(string)
				rec, ok := recs[id]
				if !ok || rec.origin != origin || float64(rec.diedAt) != z.Score {
					return 0, broken("%q in the dead letters of %q at %v: %+v", id, origin, z.Score, rec)
				}
				if _, ok := leased[id]; ok {
					return 0, broken("leased %q in the dead letters of %q", id, origin)
				}
			}
		}
	}
	for id, rec := range recs {
		if rec.origin == "" {
			continue
		}
		_, isLeased := leased[id]
		_, err := rdb.ZScore(ctx, p+"d:"+rec.origin, id).Result()
		if isLeased != (err == redis.Nil) {
			return 0, broken("dead letter %q of %q, leased %v: in its dead letters: %v", id, rec.origin, isLeased, err)
		}
	}
	// Counters.
	meta, err := rdb.HMGet(ctx, p+"meta", "sched", "ready", "leased").Result()
	if err != nil {
		return 0, err
	}
	num := func(v any) int64 { s, _ := v.(string); n, _ := strconv.ParseInt(s, 10, 64); return n }
	if num(meta[0]) != wheel || num(meta[1]) != ready || num(meta[2]) != int64(len(leased)) {
		return 0, broken("counters sched, ready, leased = %v; counted %d, %d, %d", meta, wheel, ready, len(leased))
	}
	tc, err := rdb.HGetAll(ctx, p+"tc").Result()
	if err != nil {
		return 0, err
	}
	for f, v := range tc {
		if strings.HasPrefix(f, "s") {
			topic := f[1:]
			if n, _ := strconv.ParseInt(v, 10, 64); n != perTopic[topic] || n == 0 {
				return 0, broken("counter of %q's scheduled messages is %s; its wheel holds %d", topic, v, perTopic[topic])
			}
			delete(perTopic, topic)
		}
	}
	if len(perTopic) > 0 {
		return 0, broken("topics with scheduled messages and no counter: %v", perTopic)
	}
	topics, err := rdb.SMembers(ctx, p+"topics").Result()
	if err != nil {
		return 0, err
	}
	for _, t := range topics {
		if !readyTopics[t] {
			return 0, broken("topics has %q, whose ready set is empty", t)
		}
		delete(readyTopics, t)
	}
	if len(readyTopics) > 0 {
		return 0, broken("topics lacks %v", readyTopics)
	}
	if err := checkSchedules(ctx, rdb, lay, s, recs); err != nil {
		return 0, err
	}
	return len(recs), nil
}

// chunkKey is the key of the chunk of topic's wheel in shard s bounded by b (xckey in prelude.lua).
func (l *layout) chunkKey(s int, topic, b string) string {
	return "{" + l.tags[s] + "}:xc:" + strconv.Itoa(len(topic)) + ":" + topic + b
}
