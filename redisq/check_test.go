package redisq

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// checkShards walks every key of every shard of q on the single server rdb and returns what breaks
// an invariant of the layout (see the package doc), or nil:
//
//   - each message is in exactly one place: a second's hash (the wheel), or LIVE and then either
//     its topic's ready set or the leases (and its topic's leases), at its due time or deadline;
//   - the wheel's records are in the hash of their due second, and that second is in secs;
//   - each topic's index holds exactly its wheel records, at their due times, in chunks of 1 to
//     128 entries (listpacks) whose bounds are in order and cover their entries, the first "";
//   - the dead-letter sets hold exactly the dead letters that are not leased, at their death;
//   - the shard's and the topics' counters match what they count, and topics names the topics
//     with ready messages.
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
	slices.Sort(keys)
	type where struct {
		sec   string // the wheel's second, or "" for LIVE
		topic string
		rec   record
	}
	msgs := make(map[string]where)
	var secs []string
	wheelCount, readyCount := int64(0), int64(0)
	readyTopics := map[string]bool{}
	indexes := map[string][]string{} // topic -> chunk bounds
	chunkKeys := map[string]bool{}
	for _, k := range keys {
		name := strings.TrimPrefix(k, p)
		switch {
		case strings.HasPrefix(name, "w:"):
			sec := strings.TrimPrefix(name, "w:")
			secs = append(secs, sec)
			kv, err := rdb.HGetAll(ctx, k).Result()
			if err != nil {
				return err
			}
			for id, raw := range kv {
				rec, err := decodeRecord(raw)
				if err != nil {
					return fmt.Errorf("record of %q in %s: %w", id, k, err)
				}
				if strconv.FormatInt(rec.due/1000, 10) != sec {
					return fmt.Errorf("%q due at %d is in the hash of second %s", id, rec.due, sec)
				}
				if _, dup := msgs[id]; dup {
					return fmt.Errorf("%q is in two places", id)
				}
				msgs[id] = where{sec: sec, topic: rec.topic, rec: rec}
				wheelCount++
			}
		case strings.HasPrefix(name, "r:"):
			readyTopics[strings.TrimPrefix(name, "r:")] = true
		case strings.HasPrefix(name, "xi:"):
			b, err := rdb.ZRange(ctx, k, 0, -1).Result()
			if err != nil {
				return err
			}
			indexes[strings.TrimPrefix(name, "xi:")] = b
		case strings.HasPrefix(name, "xc:"):
			chunkKeys[k] = true
		}
	}
	live, err := rdb.HGetAll(ctx, p+"live").Result()
	if err != nil {
		return err
	}
	for id, raw := range live {
		rec, err := decodeRecord(raw)
		if err != nil {
			return fmt.Errorf("record of %q in live: %w", id, err)
		}
		if _, dup := msgs[id]; dup {
			return fmt.Errorf("%q is in the wheel and in live", id)
		}
		msgs[id] = where{topic: rec.topic, rec: rec}
	}
	leases, err := rdb.ZRangeWithScores(ctx, p+"lease", 0, -1).Result()
	if err != nil {
		return err
	}
	leased := map[string]float64{}
	for _, z := range leases {
		id := z.Member.(string)
		w, ok := msgs[id]
		if !ok || w.sec != "" {
			return fmt.Errorf("lease of %q, which is not in live", id)
		}
		leased[id] = z.Score
		if sc, err := rdb.ZScore(ctx, p+"l:"+w.topic, id).Result(); err != nil || sc != z.Score {
			return fmt.Errorf("lease of %q (deadline %v) is not in its topic %q's leases: %v, %v", id, z.Score, w.topic, sc, err)
		}
	}
	for topic := range readyTopics {
		rz, err := rdb.ZRangeWithScores(ctx, p+"r:"+topic, 0, -1).Result()
		if err != nil {
			return err
		}
		for _, z := range rz {
			id := z.Member.(string)
			w, ok := msgs[id]
			switch {
			case !ok || w.sec != "":
				return fmt.Errorf("ready %q of %q is not in live", id, topic)
			case w.topic != topic || float64(w.rec.due) != z.Score:
				return fmt.Errorf("ready %q in %q at %v has topic %q and due time %d", id, topic, z.Score, w.topic, w.rec.due)
			case leased[id] != 0:
				return fmt.Errorf("%q is ready and leased", id)
			}
			readyCount++
		}
	}
	for id, w := range msgs {
		if w.sec != "" {
			continue
		}
		if _, ok := leased[id]; ok {
			continue
		}
		if sc, err := rdb.ZScore(ctx, p+"r:"+w.topic, id).Result(); err != nil || sc != float64(w.rec.due) {
			return fmt.Errorf("%q in live is neither leased nor in its ready set: %v, %v", id, sc, err)
		}
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
				if leased[id] != z.Score || msgs[id].topic != topic {
					return fmt.Errorf("%q in the leases of %q is not leased there", id, topic)
				}
			}
		case strings.HasPrefix(name, "d:"):
			origin := strings.TrimPrefix(name, "d:")
			zs, _ := rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
			for _, z := range zs {
				id := z.Member.(string)
				w, ok := msgs[id]
				if !ok || w.rec.origin != origin || float64(w.rec.diedAt) != z.Score {
					return fmt.Errorf("%q in the dead letters of %q at %v: %+v", id, origin, z.Score, w.rec)
				}
				if _, ok := leased[id]; ok {
					return fmt.Errorf("leased %q in the dead letters of %q", id, origin)
				}
			}
		}
	}
	for id, w := range msgs {
		if w.rec.origin == "" {
			continue
		}
		_, isLeased := leased[id]
		_, err := rdb.ZScore(ctx, p+"d:"+w.rec.origin, id).Result()
		if isLeased != (err == redis.Nil) {
			return fmt.Errorf("dead letter %q of %q, leased %v: in its dead letters: %v", id, w.rec.origin, isLeased, err)
		}
	}
	// The wheel's seconds, and the index.
	got, err := rdb.ZRange(ctx, p+"secs", 0, -1).Result()
	if err != nil {
		return err
	}
	slices.Sort(got)
	slices.Sort(secs)
	if !slices.Equal(got, secs) {
		return fmt.Errorf("secs %v; the wheel's hashes are %v", got, secs)
	}
	indexed := map[string]bool{}
	scheduled := map[string]int64{}
	for topic, bounds := range indexes {
		if len(bounds) == 0 || bounds[0] != "" {
			return fmt.Errorf("index of %q has bounds %q: want the first empty", topic, bounds)
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
			if enc, _ := rdb.ObjectEncoding(ctx, k).Result(); enc != "listpack" {
				return fmt.Errorf("chunk %q of %q is a %s", b, topic, enc)
			}
			for _, z := range zs {
				id := z.Member.(string)
				eb := fmt.Sprintf("%014d%s", int64(z.Score), id)
				if eb < b || (i+1 < len(bounds) && eb >= bounds[i+1]) {
					return fmt.Errorf("entry %q of %q in the chunk bounded by %q (next %q)", eb, topic, b, bounds[min(i+1, len(bounds)-1)])
				}
				w, ok := msgs[id]
				if !ok || w.sec == "" || w.topic != topic || float64(w.rec.due) != z.Score {
					return fmt.Errorf("index entry %q of %q at %v names no such message in the wheel: %+v", id, topic, z.Score, w)
				}
				if indexed[id] {
					return fmt.Errorf("%q is indexed twice", id)
				}
				indexed[id] = true
				scheduled[topic]++
			}
		}
	}
	if len(chunkKeys) > 0 {
		return fmt.Errorf("chunks outside any index: %v", chunkKeys)
	}
	for id, w := range msgs {
		if w.sec != "" && !indexed[id] {
			return fmt.Errorf("%q in the wheel at %s is not in the index of %q", id, w.sec, w.topic)
		}
	}
	// Counters.
	meta, err := rdb.HMGet(ctx, p+"meta", "sched", "ready", "leased").Result()
	if err != nil {
		return err
	}
	num := func(v any) int64 { s, _ := v.(string); n, _ := strconv.ParseInt(s, 10, 64); return n }
	if num(meta[0]) != wheelCount || num(meta[1]) != readyCount || num(meta[2]) != int64(len(leased)) {
		return fmt.Errorf("counters sched, ready, leased = %v; counted %d, %d, %d", meta, wheelCount, readyCount, len(leased))
	}
	tc, err := rdb.HGetAll(ctx, p+"tc").Result()
	if err != nil {
		return err
	}
	for f, v := range tc {
		if strings.HasPrefix(f, "s") {
			topic := f[1:]
			if n, _ := strconv.ParseInt(v, 10, 64); n != scheduled[topic] || n == 0 {
				return fmt.Errorf("counter of %q's scheduled messages is %s; its index holds %d", topic, v, scheduled[topic])
			}
			delete(scheduled, topic)
		}
	}
	if len(scheduled) > 0 {
		return fmt.Errorf("topics with scheduled messages and no counter: %v", scheduled)
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
