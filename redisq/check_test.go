package redisq

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// checkShards walks every key of every shard of q on the single server rdb and returns what breaks
// an invariant of the layout (see the package doc), or nil:
//
//   - each record of rec is in exactly one place: its topic's wheel, its topic's ready set, or
//     the leases (and its topic's leases), at its due time or lease deadline, and nothing else is;
//   - each topic's wheel is in chunks of 1 to 128 entries (listpacks, unless an ID is over 64
//     bytes) whose bounds are in order and cover their entries, the first "", and xt scores the
//     topic by its first entry;
//   - sc counts the wheel's entries of each second, and secs holds the seconds it counts;
//   - the dead-letter sets hold exactly the dead letters that are not leased, at their death;
//   - the shard's and the topics' counters match what they count, and topics names the topics
//     with ready messages;
//   - why holds a reason for exactly the records whose fail kind says they have one.
func checkShards(ctx context.Context, rdb *redis.Client, q *Queue) error {
	for s := range q.lay.shards() {
		if err := checkShard(ctx, rdb, q, s); err != nil {
			return fmt.Errorf("shard %d: %w", s, err)
		}
	}
	return nil
}

func checkShard(ctx context.Context, rdb *redis.Client, q *Queue, s int) error {
	p := "{" + q.lay.tags[s] + "}:"
	keys, err := rdb.Keys(ctx, p+"*").Result()
	if err != nil {
		return err
	}
	raw, err := rdb.HGetAll(ctx, p+"rec").Result()
	if err != nil {
		return err
	}
	recs := make(map[string]record, len(raw))
	for id, r := range raw {
		rec, err := decodeRecord(r)
		if err != nil {
			return fmt.Errorf("record of %q: %w", id, err)
		}
		recs[id] = rec
	}
	why, err := rdb.HGetAll(ctx, p+"why").Result()
	if err != nil {
		return err
	}
	for id, rec := range recs {
		if _, ok := why[id]; ok != (rec.failWhy == 'N' || rec.failWhy == 'D') {
			return fmt.Errorf("%q failed as %q, with a reason in why: %v", id, rec.failWhy, ok)
		}
		delete(why, id)
	}
	if len(why) > 0 {
		return fmt.Errorf("why holds reasons of messages without a record: %v", why)
	}
	place := make(map[string]string) // ID -> where it was found
	found := func(id, where string, topic string, score float64, due bool) error {
		rec, ok := recs[id]
		switch {
		case !ok:
			return fmt.Errorf("%s has %q, which has no record", where, id)
		case place[id] != "":
			return fmt.Errorf("%q is in %s and in %s", id, place[id], where)
		case rec.topic != topic:
			return fmt.Errorf("%q of topic %q is in %s", id, rec.topic, where)
		case due && float64(rec.due) != score:
			return fmt.Errorf("%q due at %d is in %s at %v", id, rec.due, where, score)
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
					return err
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
		return err
	}
	leased := map[string]float64{}
	for _, z := range leases {
		id := z.Member.(string)
		topic := recs[id].topic
		if err := found(id, "the leases", topic, 0, false); err != nil {
			return err
		}
		leased[id] = z.Score
		if sc, err := rdb.ZScore(ctx, p+"l:"+topic, id).Result(); err != nil || sc != z.Score {
			return fmt.Errorf("lease of %q (deadline %v) is not in its topic %q's leases: %v, %v", id, z.Score, topic, sc, err)
		}
	}
	for _, topic := range indexes {
		bounds, err := rdb.ZRange(ctx, p+"xi:"+topic, 0, -1).Result()
		if err != nil {
			return err
		}
		if len(bounds) == 0 || bounds[0] != "" {
			return fmt.Errorf("wheel of %q has bounds %q: want the first empty", topic, bounds)
		}
		for i, b := range bounds {
			k := q.chunkKey(s, topic, b)
			delete(chunkKeys, k)
			zs, err := rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
			if err != nil {
				return err
			}
			if len(zs) == 0 || len(zs) > 128 {
				return fmt.Errorf("chunk %q of %q has %d entries", b, topic, len(zs))
			}
			long := false
			for _, z := range zs {
				long = long || len(z.Member.(string)) > 64
			}
			if enc, _ := rdb.ObjectEncoding(ctx, k).Result(); enc != "listpack" && !long {
				return fmt.Errorf("chunk %q of %q is a %s", b, topic, enc)
			}
			if i == 0 {
				heads[topic] = zs[0].Score
			}
			for _, z := range zs {
				id := z.Member.(string)
				eb := fmt.Sprintf("%014d%s", int64(z.Score), id)
				if eb < b || (i+1 < len(bounds) && eb >= bounds[i+1]) {
					return fmt.Errorf("entry %q of %q in the chunk bounded by %q (next %q)", eb, topic, b, bounds[min(i+1, len(bounds)-1)])
				}
				if err := found(id, "the wheel of "+topic, topic, z.Score, true); err != nil {
					return err
				}
				wheel++
				perTopic[topic]++
				perSec[strconv.FormatInt(int64(z.Score)/1000, 10)]++
			}
		}
	}
	if len(chunkKeys) > 0 {
		return fmt.Errorf("chunks outside any wheel: %v", chunkKeys)
	}
	for id := range recs {
		if place[id] == "" {
			return fmt.Errorf("%q has a record and is nowhere", id)
		}
	}
	// The topics' heads, and the counts of the seconds.
	xt, err := rdb.ZRangeWithScores(ctx, p+"xt", 0, -1).Result()
	if err != nil {
		return err
	}
	for _, z := range xt {
		topic := z.Member.(string)
		if h, ok := heads[topic]; !ok || h != z.Score {
			return fmt.Errorf("xt scores %q at %v; its first entry is at %v (present %v)", topic, z.Score, h, ok)
		}
		delete(heads, topic)
	}
	if len(heads) > 0 {
		return fmt.Errorf("topics with a wheel and not in xt: %v", heads)
	}
	sc, err := rdb.HGetAll(ctx, p+"sc").Result()
	if err != nil {
		return err
	}
	for sec, v := range sc {
		if n, _ := strconv.ParseInt(v, 10, 64); n != perSec[sec] {
			return fmt.Errorf("sc counts %s for second %s; the wheel has %d", v, sec, perSec[sec])
		}
		delete(perSec, sec)
	}
	if len(perSec) > 0 {
		return fmt.Errorf("seconds of the wheel that sc does not count: %v", perSec)
	}
	secs, err := rdb.ZRange(ctx, p+"secs", 0, -1).Result()
	if err != nil {
		return err
	}
	for _, sec := range secs {
		if _, ok := sc[sec]; !ok {
			return fmt.Errorf("secs has %s, which sc does not count", sec)
		}
	}
	if len(secs) != len(sc) {
		return fmt.Errorf("secs has %d seconds, sc %d", len(secs), len(sc))
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
					return fmt.Errorf("%q in the leases of %q is not leased there", id, topic)
				}
			}
		case strings.HasPrefix(name, "d:"):
			origin := strings.TrimPrefix(name, "d:")
			zs, _ := rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
			for _, z := range zs {
				id := z.Member.(string)
				rec, ok := recs[id]
				if !ok || rec.origin != origin || float64(rec.diedAt) != z.Score {
					return fmt.Errorf("%q in the dead letters of %q at %v: %+v", id, origin, z.Score, rec)
				}
				if _, ok := leased[id]; ok {
					return fmt.Errorf("leased %q in the dead letters of %q", id, origin)
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
			return fmt.Errorf("dead letter %q of %q, leased %v: in its dead letters: %v", id, rec.origin, isLeased, err)
		}
	}
	// Counters.
	meta, err := rdb.HMGet(ctx, p+"meta", "sched", "ready", "leased").Result()
	if err != nil {
		return err
	}
	num := func(v any) int64 { s, _ := v.(string); n, _ := strconv.ParseInt(s, 10, 64); return n }
	if num(meta[0]) != wheel || num(meta[1]) != ready || num(meta[2]) != int64(len(leased)) {
		return fmt.Errorf("counters sched, ready, leased = %v; counted %d, %d, %d", meta, wheel, ready, len(leased))
	}
	tc, err := rdb.HGetAll(ctx, p+"tc").Result()
	if err != nil {
		return err
	}
	for f, v := range tc {
		if strings.HasPrefix(f, "s") {
			topic := f[1:]
			if n, _ := strconv.ParseInt(v, 10, 64); n != perTopic[topic] || n == 0 {
				return fmt.Errorf("counter of %q's scheduled messages is %s; its wheel holds %d", topic, v, perTopic[topic])
			}
			delete(perTopic, topic)
		}
	}
	if len(perTopic) > 0 {
		return fmt.Errorf("topics with scheduled messages and no counter: %v", perTopic)
	}
	topics, err := rdb.SMembers(ctx, p+"topics").Result()
	if err != nil {
		return err
	}
	for _, t := range topics {
		if !readyTopics[t] {
			return fmt.Errorf("topics has %q, whose ready set is empty", t)
		}
		delete(readyTopics, t)
	}
	if len(readyTopics) > 0 {
		return fmt.Errorf("topics lacks %v", readyTopics)
	}
	return nil
}

// chunkKey is the key of the chunk of topic's index in shard s bounded by b (xckey in prelude.lua).
func (q *Queue) chunkKey(s int, topic, b string) string {
	return "{" + q.lay.tags[s] + "}:xc:" + strconv.Itoa(len(topic)) + ":" + topic + b
}

// mustCheck fails the test when the layout breaks an invariant. It pauses the server's writes
// (CLIENT PAUSE WRITE) while it reads, so that the Queue's housekeeping cannot change the keys
// halfway: every script runs before or after the check.
func mustCheck(t testing.TB, ctx context.Context, rdb *redis.Client, q *Queue, after string) {
	t.Helper()
	if err := rdb.Do(ctx, "CLIENT", "PAUSE", 10000, "WRITE").Err(); err != nil {
		t.Fatal(err)
	}
	err := checkShards(ctx, rdb, q)
	if uerr := rdb.Do(ctx, "CLIENT", "UNPAUSE").Err(); uerr != nil {
		t.Fatal(uerr)
	}
	if err != nil {
		t.Fatalf("after %s: %v", after, err)
	}
}
