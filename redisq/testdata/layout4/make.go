//go:build ignore

// make.go writes deployment.json: a redisq deployment of layout version 4, made by the redisq of
// that version, as TestUpgradeFromLayout4 loads it into a real redis-server. It is kept for the
// record; it builds only against redisq at layout version 4 (commit ad35481, the last before
// version 5), so run it from a worktree of that commit:
//
//	git worktree add --detach /tmp/layout4 ad35481
//	cp make.go /tmp/layout4/redisq/testdata/layout4/ && cd /tmp/layout4
//	redis-server --port 6399 --save '' --appendonly no &
//	go run ./redisq/testdata/layout4/make.go -addr localhost:6399 > deployment.json
//
// The deployment (prefix "v4", 4 shards, at most 2 attempts, dead letters to "dead") holds what
// testdata/layout3's does (made by the same program, with this prefix), and what version 4 added:
//
//   - a schedule "yearly" of topic "sched" ("0 0 1 1 *", UTC), its next fire put ahead (a
//     message of the topic, scheduled), then paused: so that no later fire changes the count of
//     messages whatever the date the test runs;
//
// and as in version 3:
//
//   - topic "later": 20 messages due in 2100, chosen IDs later-0 to later-19, put in a batch
//     whose IDs live on several shards (so it leaves aliases);
//   - topic "due": 30 messages due now, generated IDs, payloads "due-<i>";
//   - topic "nacked": 10 messages received and nacked once with a delay of a second (last
//     failure "nacked", attempt 1), due again by the time the dump is read;
//   - topic "doomed": 5 messages received and nacked twice (dead letters on "dead" after their
//     second attempt);
//   - topic "held": 10 messages received with a visibility of a second, still leased in the dump
//     (their leases run out by the time it is read);
//   - topic "stopped": 3 messages, the topic paused;
//   - topic "why": 2 messages received and nacked with reasons, one of them to the dead letters
//     at once ("try later", "no such mailbox");
//   - topic "limited": a limit (rate 100, burst 10, concurrency 5) and 8 messages, 5 of them
//     received with a visibility of a second (their permits held in the dump, run out by the time
//     it is read).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"sort"
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

func main() {
	addr := flag.String("addr", "localhost:6399", "the redis-server to write the deployment to and dump it from (flushed first)")
	flag.Parse()
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: *addr})
	must(rdb.FlushAll(ctx).Err())
	q, err := redisq.Open(ctx, rdb, redisq.WithPrefix("v4"), redisq.WithShards(4), redisq.WithMaxAttempts(2),
		redisq.WithDeadLetterTopic("dead"), redisq.WithBackoff(time.Millisecond, time.Millisecond))
	must(err)
	later := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	var ms []queue.Message
	for i := range 20 {
		ms = append(ms, queue.Message{ID: fmt.Sprintf("later-%d", i), Topic: "later", Payload: []byte(fmt.Sprintf("later-%d", i)), DeliverAt: later})
	}
	_, err = q.PutBatch(ctx, ms)
	must(err)
	put := func(topic string, n int) {
		for i := range n {
			_, err := q.Put(ctx, queue.Message{Topic: topic, Payload: []byte(fmt.Sprintf("%s-%d", topic, i))})
			must(err)
		}
	}
	receive := func(topic string, n int, vis time.Duration) []queue.Delivery {
		var out []queue.Delivery
		for len(out) < n {
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			ds, err := q.Receive(rctx, topic, n-len(out), vis)
			cancel()
			must(err)
			out = append(out, ds...)
		}
		return out
	}
	put("due", 30)
	put("nacked", 10)
	for _, d := range receive("nacked", 10, time.Minute) {
		must(q.Nack(ctx, d.Receipt, time.Second))
	}
	put("doomed", 5)
	for range 2 {
		for _, d := range receive("doomed", 5, time.Minute) {
			must(q.Nack(ctx, d.Receipt, 0))
		}
	}
	put("held", 10)
	receive("held", 10, time.Second)
	put("stopped", 3)
	must(q.Pause(ctx, "stopped"))
	put("why", 2)
	why := receive("why", 2, time.Minute)
	must(q.Nack(ctx, why[0].Receipt, time.Second, queue.WithReason("try later")))
	must(q.Nack(ctx, why[1].Receipt, 0, queue.WithReason("no such mailbox"), queue.WithDeadLetter()))
	must(q.SetLimit(ctx, "limited", queue.Limit{Rate: 100, Burst: 10, Concurrency: 5}))
	put("limited", 8)
	receive("limited", 5, time.Second)
	_, err = q.SetSchedule(ctx, queue.Schedule{Name: "yearly", Topic: "sched", Payload: []byte("new year"), Spec: "0 0 1 1 *"})
	must(err)
	must(q.PauseSchedule(ctx, "yearly"))
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
