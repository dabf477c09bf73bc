package redisq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/queue"
)

// checkShards checks every shard of q on the single server rdb (see Check) and returns the first
// broken invariant, or nil.
func checkShards(ctx context.Context, rdb *redis.Client, q *Queue) error {
	limits := make([]shardLimits, q.lay.shards())
	for s := range q.lay.shards() {
		if _, err := checkShard(ctx, rdb, q.lay, s); err != nil {
			return fmt.Errorf("shard %d: %w", s, err)
		}
		sl, err := checkShardLimits(ctx, rdb, q.lay, s)
		if err != nil {
			return fmt.Errorf("shard %d: %w", s, err)
		}
		limits[s] = sl
	}
	if problems := checkLimitsAcross(q.lay, limits); len(problems) > 0 {
		return errors.New(strings.Join(problems, "; "))
	}
	return nil
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

// TestCheck runs the exported Check, as an operator (tock check -redis) does, on a deployment of
// one server and one of a cluster: sound after puts, receives and acks, and then damaged by hand.
func TestCheck(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	s := startServer(t)
	c := redistest.StartCluster(t, redistest.ClusterConfig{Masters: 2})
	for _, tc := range []struct {
		name string
		rdb  redis.UniversalClient
	}{
		{"server", singleClient(t, s.Addr)},
		{"cluster", clusterClient(t, c.Addrs())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := openQueue(t, tc.rdb, WithShards(4))
			for i := range 20 {
				if _, err := q.Put(ctx, queue.Message{Topic: "check", Payload: []byte("x"), DeliverAt: time.Now().Add(time.Duration(i%2) * time.Hour)}); err != nil {
					t.Fatal(err)
				}
			}
			ds, err := q.Receive(ctx, "check", 3, time.Minute)
			if err != nil || len(ds) == 0 {
				t.Fatalf("receive: %v, %v", ds, err)
			}
			if err := q.Ack(ctx, ds[0].Receipt); err != nil {
				t.Fatal(err)
			}
			rep, err := Check(ctx, tc.rdb, q.cfg.prefix)
			if err != nil || len(rep.Problems) != 0 || rep.Messages != 19 || rep.Shards != 4 {
				t.Fatalf("Check of a sound deployment: %+v, %v; want 4 shards, 19 messages, no problem", rep, err)
			}
			// A message taken out of its wheel behind the engine's back.
			var victim string
			for s := range 4 {
				node, err := masterOf(ctx, tc.rdb, q.lay.metaKey(s))
				if err != nil {
					t.Fatal(err)
				}
				ids, _ := node.HKeys(ctx, "{"+q.lay.tags[s]+"}:rec").Result()
				for _, id := range ids {
					if n, _ := node.ZRem(ctx, "{"+q.lay.tags[s]+"}:r:check", id).Result(); n == 1 {
						victim = id
						break
					}
				}
				if victim != "" {
					break
				}
			}
			if victim == "" {
				t.Fatal("no ready message to take out")
			}
			rep, err = Check(ctx, tc.rdb, q.cfg.prefix)
			if err != nil || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], victim) {
				t.Fatalf("Check after a message was taken out of its ready set: %+v, %v; want one problem naming %s", rep, err, victim)
			}
		})
	}
	if _, err := Check(ctx, singleClient(t, s.Addr), "never-made"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Check of a prefix with no deployment: %v; want ErrNotFound", err)
	}
}

// TestCheckLimits checks what Check verifies of the delivery limits: sound with limits set and
// permits held, and each damage of a limit key found.
func TestCheckLimits(t *testing.T) {
	ctx := testCtx(t, time.Minute)
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	const shards = 4
	// open returns a sound deployment: a limited topic with permits held, and a topic limited in
	// its concurrency only.
	open := func(t *testing.T) *Queue {
		q := openQueue(t, rdb, WithShards(shards))
		if err := q.SetLimit(ctx, "rated", queue.Limit{Rate: 100, Burst: 10, Concurrency: 5}); err != nil {
			t.Fatal(err)
		}
		if err := q.SetLimit(ctx, "few", queue.Limit{Concurrency: 2}); err != nil {
			t.Fatal(err)
		}
		for range 3 {
			if _, err := q.Put(ctx, queue.Message{Topic: "rated"}); err != nil {
				t.Fatal(err)
			}
		}
		if ds, err := q.Receive(ctx, "rated", 2, time.Minute); err != nil || len(ds) == 0 {
			t.Fatalf("receive: %v, %v", ds, err)
		}
		return q
	}
	key := func(q *Queue, shard int, suffix string) string { return "{" + q.lay.tags[shard] + "}:" + suffix }
	notHome := func(q *Queue, topic string) int { return (q.lay.home(topic) + 1) % shards }
	for _, c := range []struct {
		name   string
		damage func(q *Queue) error
		want   string
	}{
		{"sound", func(*Queue) error { return nil }, ""},
		{"a shard's copy of a limit differs", func(q *Queue) error {
			return rdb.HSet(ctx, key(q, 2, "lim"), "rated", "100,10,6").Err()
		}, "not shard 0's"},
		{"a shard lacks a limit", func(q *Queue) error {
			return rdb.HDel(ctx, key(q, 1, "lim"), "few").Err()
		}, "not shard 0's"},
		{"a malformed limit", func(q *Queue) error {
			for s := range shards {
				if err := rdb.HSet(ctx, key(q, s, "lim"), "rated", "100,10").Err(); err != nil {
					return err
				}
			}
			return nil
		}, "want rate,burst,concurrency"},
		{"a burst without a rate", func(q *Queue) error {
			for s := range shards {
				if err := rdb.HSet(ctx, key(q, s, "lim"), "few", "0,3,2").Err(); err != nil {
					return err
				}
			}
			return nil
		}, "without a rate"},
		{"a bucket fuller than the burst", func(q *Queue) error {
			return rdb.HSet(ctx, key(q, q.lay.home("rated"), "lb:rated"), "tok", "11").Err()
		}, "tokens"},
		{"a bucket of a topic without a limit", func(q *Queue) error {
			return rdb.HSet(ctx, key(q, q.lay.home("free"), "lb:free"), "tok", "1", "ts", "1").Err()
		}, "has no limit"},
		{"a bucket away from its home shard", func(q *Queue) error {
			return rdb.HSet(ctx, key(q, notHome(q, "rated"), "lb:rated"), "tok", "1", "ts", "1").Err()
		}, "whose home is shard"},
		{"permits away from their home shard", func(q *Queue) error {
			return rdb.ZAdd(ctx, key(q, notHome(q, "few"), "lp:few"), redis.Z{Score: 1, Member: newToken()}).Err()
		}, "whose home is shard"},
		{"a permit that is not a lease token", func(q *Queue) error {
			return rdb.ZAdd(ctx, key(q, q.lay.home("rated"), "lp:rated"), redis.Z{Score: 1, Member: "x"}).Err()
		}, "want a lease token"},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := open(t)
			if err := c.damage(q); err != nil {
				t.Fatal(err)
			}
			rep, err := Check(ctx, rdb, q.cfg.prefix)
			switch {
			case err != nil:
				t.Fatal(err)
			case c.want == "" && len(rep.Problems) != 0:
				t.Fatalf("Check of a sound deployment with limits: %q", rep.Problems)
			case c.want != "" && (len(rep.Problems) == 0 || !strings.Contains(strings.Join(rep.Problems, "; "), c.want)):
				t.Fatalf("Check found %q; want a problem saying %q", rep.Problems, c.want)
			}
		})
	}
}
