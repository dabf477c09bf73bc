package delayq

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"
)

// TestHeadersEveryPath follows messages with headers through every path a message takes in
// delayq: into memory and the checkpoint, into the disk wheel and loaded from it, rolled beyond
// the horizon, relocated by compaction, made due by DeliverNow from the disk wheel, replayed after
// a crash and read back from the checkpoint's positions after a clean reopen. Each delivery and
// each admin view carries the headers it was put with.
func TestHeadersEveryPath(t *testing.T) {
	base := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		opts := []Option{WithSlot(100 * time.Millisecond), WithHorizon(2 * time.Second),
			WithCheckpointInterval(time.Hour), WithCompaction(0, 0), WithNoSync(), WithLogger(quiet)}
		dir := filepath.Join(base, "q")
		q := open(t, dir, opts...)
		now := time.Now()
		want := map[string]map[string]string{}
		put := func(i int, at time.Duration) string {
			t.Helper()
			h := map[string]string{"traceparent": fmt.Sprintf("00-%032x-%016x-01", i+1, i+1), "n": fmt.Sprint(i)}
			if i == 3 {
				h = nil // one without, among them
			}
			id, err := q.Put(ctx, Message{Topic: "t", Payload: []byte(fmt.Sprint(i)), Headers: h, DeliverAt: now.Add(at)})
			if err != nil {
				t.Fatalf("Put: %v", err)
			}
			want[id] = maps.Clone(h)
			return id
		}
		put(0, 10*time.Millisecond) // into memory at once: the checkpoint holds it
		if err := q.checkpoint(); err != nil {
			t.Fatal(err)
		}
		put(1, time.Second)                   // the disk wheel; loaded into memory
		now1 := put(2, 1500*time.Millisecond) // made due at once from the disk wheel
		put(3, 1501*time.Millisecond)
		put(4, 5*time.Second) // beyond the horizon: rolled when its list is loaded
		put(5, 1800*time.Millisecond)
		m, err := q.Message(ctx, now1)
		if err != nil || !maps.Equal(m.Headers, want[now1]) {
			t.Fatalf("Message of a message in the disk wheel: headers %q, %v; want %q", m.Headers, err, want[now1])
		}
		if ok, err := q.DeliverNow(ctx, now1); !ok || err != nil {
			t.Fatalf("DeliverNow = %v, %v", ok, err)
		}
		if _, err := q.compact(newCompactor(), 2); err != nil {
			t.Fatalf("compaction: %v", err)
		}
		check(t, q)

		crashed := filepath.Join(base, "crashed")
		crashCopy(t, nil, q, dir, crashed)
		q = open(t, crashed, opts...)
		check(t, q)
		receive := func(n int) {
			t.Helper()
			for range n {
				d := receiveOne(t, q, "t", 10*time.Second, time.Hour)
				h, ok := want[d.ID]
				if !ok {
					t.Fatalf("unexpected delivery %s", d.ID)
				}
				if len(d.Headers) != len(h) || !maps.Equal(d.Headers, h) {
					t.Fatalf("%s delivered with headers %q; put with %q", d.ID, d.Headers, h)
				}
				delete(want, d.ID)
				if err := q.Ack(ctx, d.Receipt); err != nil {
					t.Fatal(err)
				}
			}
		}
		receive(3) // the one in memory since the checkpoint, the one made due, the first loaded
		time.Sleep(1900 * time.Millisecond)
		synctest.Wait()
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		q = open(t, crashed, opts...)
		check(t, q)
		receive(len(want))
		check(t, q)
	})
}
