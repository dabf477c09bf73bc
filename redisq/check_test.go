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
	for s := range q.lay.shards() {
		if _, err := checkShard(ctx, rdb, q.lay, s); err != nil {
			return fmt.Errorf("shard %d: %w", s, err)
		}
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
