package redisq

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/queue"
)

// overlapReceives is a go-redis hook that holds the first receive script it sees, once armed,
// until a second one is sent (or a while has passed), and records whether one was: whether a
// Receive asks its shards at once or one after another.
type overlapReceives struct {
	passHook
	armed    atomic.Bool
	held     sync.Once
	inFlight atomic.Int32
	second   chan struct{}
	once     sync.Once
}

func (h *overlapReceives) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !h.armed.Load() || !runsScriptOf(cmd, receiveScript.Hash()) {
			return next(ctx, cmd)
		}
		if h.inFlight.Add(1) > 1 {
			h.once.Do(func() { close(h.second) })
		}
		defer h.inFlight.Add(-1)
		// Held until a second script is sent, or until the Receive gives up: a Receive that asks
		// one shard after another never sends it, however fast the machine.
		h.held.Do(func() {
			select {
			case <-h.second:
			case <-ctx.Done():
			}
		})
		return next(ctx, cmd)
	}
}

// overlapped reports whether a second receive script was sent while one was in flight.
func (h *overlapReceives) overlapped() bool {
	select {
	case <-h.second:
		return true
	default:
		return false
	}
}

// putAcrossShards puts n messages of topic due now under IDs whose home shards cover every one of
// q's, and returns how many each shard got.
func putAcrossShards(t *testing.T, ctx context.Context, q *Queue, topic string, n int) []int {
	t.Helper()
	per := make([]int, q.lay.shards())
	for i := range n {
		id := fmt.Sprintf("%s-%d", topic, i)
		if _, err := q.Put(ctx, queue.Message{ID: id, Topic: topic}); err != nil {
			t.Fatal(err)
		}
		per[q.lay.home(id)]++
	}
	for s, c := range per {
		if c == 0 && n >= 10*len(per) {
			t.Fatalf("no message in shard %d of %d: %v", s, len(per), per)
		}
	}
	return per
}

// TestReceiveAsksDueShardsAtOnce receives a burst due in every shard: the Receive sends the
// receive scripts of the due shards at once (the first is held until a second is sent), and takes
// the whole burst in one call. Before, it asked them one after another, a round trip each, and a
// consumer of 1,000 fires due in the same millisecond over 16 shards waited for 16 round trips.
func TestReceiveAsksDueShardsAtOnce(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := testCtx(t, time.Minute)
	h := &overlapReceives{second: make(chan struct{})}
	rdb := singleClient(t, s.Addr)
	rdb.AddHook(h)
	q := openQueue(t, rdb, WithShards(16))
	putAcrossShards(t, ctx, q, "t", 160)
	h.armed.Store(true)
	ds, err := q.Receive(ctx, "t", 1000, time.Minute)
	if !h.overlapped() {
		t.Fatalf("the due shards were asked one after another: no receive script was sent while another was in flight (Receive: %v)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if len(ds) != 160 {
		t.Errorf("one Receive of up to 1,000 took %d of the 160 due", len(ds))
	}
}

// TestReceiveSharesMaxOverShards receives a burst due in every shard with max below it: each
// Receive leases exactly max (the shards asked at once share it, and those that gave their whole
// share are asked again for the rest), none twice, and the last takes what is left.
func TestReceiveSharesMaxOverShards(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := testCtx(t, time.Minute)
	q := openQueue(t, singleClient(t, s.Addr), WithShards(16))
	putAcrossShards(t, ctx, q, "t", 160)
	seen := make(map[string]bool)
	for _, c := range []struct{ max, want int }{{1, 1}, {10, 10}, {100, 100}, {1000, 49}} {
		ds, err := q.Receive(ctx, "t", c.max, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != c.want {
			t.Errorf("Receive of up to %d leased %d; want %d", c.max, len(ds), c.want)
		}
		for _, d := range ds {
			if seen[d.ID] {
				t.Errorf("%q leased twice", d.ID)
			}
			seen[d.ID] = true
		}
	}
	// As many due as max, unevenly over the shards (some have more than their share of max, more
	// of them than the rest of max): one Receive takes them all. Before, the second round asked
	// only as many of the shards left as messages were left to take, and the others waited for the
	// next Receive (TestConformanceCluster/OrderByDueTime saw 20 due taken in two).
	for _, n := range []int{17, 20, 23, 31, 40} {
		topic := fmt.Sprintf("u%d", n)
		per := putAcrossShards(t, ctx, q, topic, n)
		ds, err := q.Receive(ctx, topic, n, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(ds) != n {
			t.Errorf("Receive of up to %d with %d due over the shards (%v) leased %d", n, n, per, len(ds))
		}
	}
}

// failShard is a go-redis hook that fails the receive scripts of one shard (by its meta key).
type failShard struct {
	passHook
	key string
}

func (h *failShard) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if args := cmd.Args(); runsScriptOf(cmd, receiveScript.Hash()) && len(args) > 3 && args[3] == h.key {
			err := errors.New("refused by the test")
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// TestReceiveGoesOnPastAFailingShard receives one message with every shard due while the receive
// scripts of the first fail: the Receive asks the other shards and gets one, as it did when it
// asked them one after another. A first version of the change that asks them at once gave up
// when the shards of its first round all failed, though it had asked only as many as max.
func TestReceiveGoesOnPastAFailingShard(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := testCtx(t, time.Minute)
	rdb := singleClient(t, s.Addr)
	q := openQueue(t, rdb, WithShards(4))
	putAcrossShards(t, ctx, q, "t", 40)
	rdb.AddHook(&failShard{key: q.lay.metaKey(0)})
	for range 3 {
		ds, err := q.Receive(ctx, "t", 1, time.Minute)
		if err != nil {
			t.Fatalf("Receive with shard 0 failing: %v", err)
		}
		if len(ds) != 1 {
			t.Fatalf("Receive of one with shard 0 failing: %d deliveries", len(ds))
		}
		if q.lay.home(ds[0].ID) == 0 {
			t.Fatalf("Receive delivered %q, of shard 0, whose scripts fail", ds[0].ID)
		}
	}
}
