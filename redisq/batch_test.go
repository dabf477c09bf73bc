package redisq

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/queue"
)

// idsInShards returns chosen IDs whose home shards are, in order, different from each other.
func idsInShards(q *Queue, n int) []string {
	var ids []string
	used := make(map[int]bool)
	for i := 0; len(ids) < n; i++ {
		id := fmt.Sprintf("job-%d", i)
		if s := q.lay.home(id); !used[s] {
			used[s] = true
			ids = append(ids, id)
		}
	}
	return ids
}

func aliasCount(t testing.TB, ctx context.Context, rdb *redis.Client, q *Queue) int {
	t.Helper()
	n := 0
	for s := range q.lay.shards() {
		c, err := rdb.HLen(ctx, "{"+q.lay.tags[s]+"}:alias").Result()
		if err != nil {
			t.Fatal(err)
		}
		n += int(c)
	}
	return n
}

// TestBatchAcrossShards puts a batch whose chosen IDs belong to three shards: it is stored whole in
// the first one's shard, the others stay unique through their aliases (a different message under
// one of them is a duplicate, the same one a retried Put), Cancel finds them, and the aliases go
// when their messages are done.
func TestBatchAcrossShards(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	q := openQueue(t, rdb, WithShards(4))
	ctx := testCtx(t, 30*time.Second)
	ids := idsInShards(q, 3)
	batch := []queue.Message{
		{ID: ids[0], Topic: "t", Payload: []byte("0")},
		{ID: ids[1], Topic: "t", Payload: []byte("1"), DeliverAt: time.Now().Add(time.Hour)},
		{Topic: "t", Payload: []byte("generated")},
		{ID: ids[2], Topic: "t", Payload: []byte("2")},
	}
	got, err := q.PutBatch(ctx, batch)
	if err != nil {
		t.Fatal(err)
	}
	if n := aliasCount(t, ctx, rdb, q); n != 2 {
		t.Fatalf("%d aliases; want 2", n)
	}
	// Its chosen messages again are a retry of every message: the batch succeeds and stores
	// nothing. (The whole batch again is not: its generated message is a new one.)
	chosen := []queue.Message{batch[0], batch[1], batch[3]}
	if again, err := q.PutBatch(ctx, chosen); err != nil || again[1] != ids[1] {
		t.Fatalf("the chosen messages of the batch again: %v, %v", again, err)
	}
	if _, err := q.PutBatch(ctx, batch); !errors.Is(err, queue.ErrDuplicate) {
		t.Fatalf("the batch again, with a new generated message: %v; want ErrDuplicate", err)
	}
	if _, err := q.Put(ctx, batch[1]); err != nil {
		t.Fatalf("Put of an aliased message as it was put: %v", err)
	}
	other := batch[1]
	other.Payload = []byte("other")
	var de *queue.DuplicateError
	if _, err := q.Put(ctx, other); !errors.As(err, &de) || de.ID != ids[1] {
		t.Fatalf("Put of another message under an aliased ID: %v; want a DuplicateError", err)
	}
	if ok, err := q.Cancel(ctx, ids[1]); !ok || err != nil {
		t.Fatalf("Cancel of an aliased ID: %v, %v", ok, err)
	}
	if ok, err := q.Cancel(ctx, ids[1]); ok || err != nil {
		t.Fatalf("second Cancel of an aliased ID: %v, %v; want false", ok, err)
	}
	ds := receiveN(t, ctx, q, "t", 3)
	seen := make(map[string]bool)
	for _, d := range ds {
		if seen[d.ID] {
			t.Fatalf("%q delivered twice", d.ID)
		}
		seen[d.ID] = true
	}
	if !seen[ids[0]] || !seen[ids[2]] || !seen[got[2]] {
		t.Fatalf("delivered %v; want %q, %q and %q", seen, ids[0], ids[2], got[2])
	}
	// Acks and cancels remove the aliases in the background.
	deadline := time.Now().Add(5 * time.Second)
	for aliasCount(t, ctx, rdb, q) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d aliases left after their messages were done", aliasCount(t, ctx, rdb, q))
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The IDs are free again.
	if _, err := q.PutBatch(ctx, chosen); err != nil {
		t.Fatalf("the batch again after its messages were done: %v", err)
	}
}

// TestBatchInterruptedBetweenSteps stops a cross-shard batch after it reserved its aliases and
// before it wrote its messages, as if its process died there: the IDs it reserved can be put and
// cancelled, the batch can never be written late, and nothing is stored twice.
func TestBatchInterruptedBetweenSteps(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	q := openQueue(t, rdb, WithShards(4))
	ctx := testCtx(t, 30*time.Second)
	ids := idsInShards(q, 3)
	died := errors.New("the process died")
	var token string
	q.testHookBatch = func(step string) error {
		// Keep the token, to play the dead process's late write below.
		home := q.lay.home(ids[1])
		a, err := rdb.HGet(ctx, "{"+q.lay.tags[home]+"}:alias", ids[1]).Result()
		if err != nil {
			t.Fatalf("no alias of %q after step %s: %v", ids[1], step, err)
		}
		_, token, _ = parseAlias(a, q.lay.shards())
		return died
	}
	batch := []queue.Message{
		{ID: ids[0], Topic: "t", Payload: []byte("0")},
		{ID: ids[1], Topic: "t", Payload: []byte("1")},
		{ID: ids[2], Topic: "t", Payload: []byte("2")},
	}
	if _, err := q.PutBatch(ctx, batch); !errors.Is(err, died) {
		t.Fatalf("PutBatch interrupted: %v", err)
	}
	q.testHookBatch = nil
	if n := aliasCount(t, ctx, rdb, q); n != 2 {
		t.Fatalf("%d aliases left by the interrupted batch; want 2", n)
	}
	// A Put of one reserved ID resolves its alias (the batch never wrote) and stores the message.
	if _, err := q.Put(ctx, queue.Message{ID: ids[1], Topic: "t", Payload: []byte("single")}); err != nil {
		t.Fatalf("Put of an ID reserved by an interrupted batch: %v", err)
	}
	// A Cancel of the other finds no message and removes its alias.
	if ok, err := q.Cancel(ctx, ids[2]); ok || err != nil {
		t.Fatalf("Cancel of an ID reserved by an interrupted batch: %v, %v; want false", ok, err)
	}
	if n := aliasCount(t, ctx, rdb, q); n != 0 {
		t.Fatalf("%d aliases left; want none", n)
	}
	// The dead process's batch, written late, is refused.
	shard := q.lay.home(ids[0])
	r := &request{kind: opScript, shard: shard, script: putScript, args: func(int, bool) []any {
		return []any{"a", token, 0, 1, ids[1], "0", "t", "late", "1", "nonce", ""}
	}}
	if err := q.writer.do(ctx, r); err != nil || anyStr(first(r.reply)) != "aborted" {
		t.Fatalf("the interrupted batch written late: %v, %v; want aborted", r.reply, err)
	}
	// And the batch made again succeeds but for the ID now taken.
	var de *queue.DuplicateError
	if _, err := q.PutBatch(ctx, batch); !errors.As(err, &de) || de.ID != ids[1] {
		t.Fatalf("the batch again: %v; want a DuplicateError for %q", err, ids[1])
	}
	ds := receiveN(t, ctx, q, "t", 1)
	if ds[0].ID != ids[1] || string(ds[0].Payload) != "single" {
		t.Fatalf("delivered %q %q; want %q single", ds[0].ID, ds[0].Payload, ids[1])
	}
	batch[1].ID = "free-now"
	if _, err := q.PutBatch(ctx, batch); err != nil {
		t.Fatalf("the batch with a free ID: %v", err)
	}
	if ds := receiveN(t, ctx, q, "t", 3); len(ds) != 3 {
		t.Fatalf("received %d", len(ds))
	}
}
