//go:build ignore

// fires.go writes fires.json: a redisq deployment of layout version 3 holding messages whose
// chosen IDs have the form of a schedule's fire ("<name>@<RFC 3339 time>"), made by the redisq of
// that version, as TestUpgradeFiresFromLayout3 loads it into a real redis-server. Version 3 homed
// such an ID by FNV-1a of the whole ID; version 4 and later home it with the name, so that a
// schedule and its fires share a shard. It is kept for the record; it builds only against redisq
// at layout version 3 (commit a0f831c, the last before version 4), so run it from a worktree of
// that commit:
//
//	git worktree add --detach /tmp/layout3 a0f831c
//	cp fires.go /tmp/layout3/redisq/testdata/layout3/ && cd /tmp/layout3
//	redis-server --port 6399 --save '' --appendonly no &
//	go run ./redisq/testdata/layout3/fires.go -addr localhost:6399 > fires.json
//
// The deployment (prefix "v3f", 4 shards, at most 2 attempts, dead letters to "dead") holds, each
// under an ID whose home under version 3 (FNV-1a of the ID) is not that of its name (FNV-1a of
// the name), unless said otherwise; the IDs are the first of their pattern, in the order of i,
// that have the property:
//
//   - topic "later": 3 messages due in 2100, put one by one, IDs "later<i>@2100-01-01T00:00:00Z";
//   - topic "due": 1 message due now, ID "due<i>@2026-01-01T00:00:00Z";
//   - topic "doomed": 1 message received and nacked to its dead letters at once, ID
//     "doomed<i>@2026-01-01T00:00:00Z";
//   - topic "batch": a batch of 3 due in 2100: "lead" (a chosen ID of no fire's form, whose home
//     B puts the batch there), then "near<i>@2100-01-01T00:00:00Z", whose name's home is B, and
//     "far<i>@2100-01-01T00:00:00Z", whose name's home is neither B nor its own home under
//     version 3 (both aliased from their version 3 homes);
//   - topic "same": 1 message due in 2100 whose ID "same@2100-01-01T00:00:<i>Z" has the same
//     home under both versions. (For a given time, the two homes of "<name>@<time>" differ by a
//     fixed permutation of the 4 shards: FNV-1a's low bits mix only lower bits. So it is the
//     time that varies here.)
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"hash/fnv"
	"log"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/redisq"
)

// A key is one Redis key of the dump: its type and its value in the form of that type.
type key struct {
	Type   string            `json:"type"`
	String string            `json:"string,omitempty"`
	Hash   map[string]string `json:"hash,omitempty"`
	Set    []string          `json:"set,omitempty"`
	ZSet   []member          `json:"zset,omitempty"`
	List   []string          `json:"list,omitempty"`
}

type member struct {
	Member string  `json:"member"`
	Score  float64 `json:"score"`
}

const shards = 4

func home(s string) int {
	h := fnv.New64a()
	h.Write([]byte(s))
	return int(h.Sum64() % shards)
}

// pick returns the first ID of pattern (with %d for i) whose homes under version 3 (the whole ID)
// and under version 4 (its name, before the '@') satisfy ok.
func pick(pattern string, ok func(v3, v4 int) bool) string {
	for i := range 60 {
		id := fmt.Sprintf(pattern, i)
		name, _, _ := strings.Cut(id, "@")
		if ok(home(id), home(name)) {
			return id
		}
	}
	log.Fatalf("no ID of the pattern %q has the homes wanted", pattern)
	return ""
}

func moved(v3, v4 int) bool { return v3 != v4 }

func main() {
	addr := flag.String("addr", "localhost:6399", "the redis-server to write the deployment to and dump it from (flushed first)")
	flag.Parse()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: *addr})
	must(rdb.FlushAll(ctx).Err())
	q, err := redisq.Open(ctx, rdb, redisq.WithPrefix("v3f"), redisq.WithShards(shards), redisq.WithMaxAttempts(2),
		redisq.WithDeadLetterTopic("dead"), redisq.WithBackoff(time.Millisecond, time.Millisecond))
	must(err)
	later := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	put := func(id, topic string, at time.Time) {
		_, err := q.Put(ctx, queue.Message{ID: id, Topic: topic, Payload: []byte(id), DeliverAt: at})
		must(err)
	}
	for _, p := range []string{"later%d-a", "later%d-b", "later%d-c"} {
		put(pick(p+"@2100-01-01T00:00:00Z", moved), "later", later)
	}
	put(pick("due%d@2026-01-01T00:00:00Z", moved), "due", time.Time{})
	doomed := pick("doomed%d@2026-01-01T00:00:00Z", moved)
	put(doomed, "doomed", time.Time{})
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	ds, err := q.Receive(rctx, "doomed", 1, time.Minute)
	cancel()
	must(err)
	must(q.Nack(ctx, ds[0].Receipt, 0, queue.WithDeadLetter()))
	b := home("lead")
	near := pick("near%d@2100-01-01T00:00:00Z", func(v3, v4 int) bool { return v3 != b && v4 == b })
	far := pick("far%d@2100-01-01T00:00:00Z", func(v3, v4 int) bool { return v3 != b && v4 != b && v4 != v3 })
	var batch []queue.Message
	for _, id := range []string{"lead", near, far} {
		batch = append(batch, queue.Message{ID: id, Topic: "batch", Payload: []byte(id), DeliverAt: later})
	}
	_, err = q.PutBatch(ctx, batch)
	must(err)
	put(pick("same@2100-01-01T00:00:%02dZ", func(v3, v4 int) bool { return v3 == v4 }), "same", later)
	must(q.Close())

	keys, err := rdb.Keys(ctx, "*").Result()
	must(err)
	sort.Strings(keys)
	dump := make(map[string]key, len(keys))
	for _, k := range keys {
		t, err := rdb.Type(ctx, k).Result()
		must(err)
		v := key{Type: t}
		switch t {
		case "string":
			v.String, err = rdb.Get(ctx, k).Result()
		case "hash":
			v.Hash, err = rdb.HGetAll(ctx, k).Result()
		case "set":
			v.Set, err = rdb.SMembers(ctx, k).Result()
			sort.Strings(v.Set)
		case "zset":
			var zs []redis.Z
			zs, err = rdb.ZRangeWithScores(ctx, k, 0, -1).Result()
			for _, z := range zs {
				v.ZSet = append(v.ZSet, member{Member: z.Member.(string), Score: z.Score})
			}
		case "list":
			v.List, err = rdb.LRange(ctx, k, 0, -1).Result()
		default:
			log.Fatalf("key %q of type %s", k, t)
		}
		must(err)
		if ttl, err := rdb.PTTL(ctx, k).Result(); err == nil && ttl > 0 {
			log.Fatalf("key %q expires (in %v): not kept by the dump", k, ttl)
		}
		dump[k] = v
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	must(enc.Encode(dump))
}

func must(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
