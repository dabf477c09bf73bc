package delayq

import (
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

// TestWriteV4Fixture writes testdata/v4: queue directories as this version of delayq (checkpoint
// version 4, records before the operator's actions: Cancels without topics, Updates without the
// cause of the failure, no pause) leaves them, for the test that newer versions open them. The
// receipt secret is left out, as directories written before receipts carried a MAC have none.
// It runs only when DELAYQ_WRITE_V4_FIXTURE names the testdata directory to write into.
func TestWriteV4Fixture(t *testing.T) {
	out := os.Getenv("DELAYQ_WRITE_V4_FIXTURE")
	if out == "" {
		t.Skip("set DELAYQ_WRITE_V4_FIXTURE to the directory to write into")
	}
	base := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		opts := []Option{WithSlot(100 * time.Millisecond), WithHorizon(10 * time.Second), WithSegmentSize(4 << 10),
			WithCheckpointInterval(time.Hour), WithCompaction(0, 0), WithMaxAttempts(2), WithLogger(quiet)}
		dir := filepath.Join(base, "q")
		q := open(t, dir, opts...)
		t0 := time.Now()
		type want struct {
			topic   string
			due     time.Time
			payload []byte
		}
		pending := map[string]want{}
		put := func(m Message) string {
			t.Helper()
			id, err := q.Put(ctx, m)
			if err != nil {
				t.Fatal(err)
			}
			due := m.DeliverAt
			if due.Before(time.Now()) {
				due = time.Now()
			}
			pending[id] = want{m.Topic, due, m.Payload}
			return id
		}
		cancel := func(id string) {
			t.Helper()
			if ok, err := q.Cancel(ctx, id); !ok || err != nil {
				t.Fatalf("Cancel(%s) = %v, %v", id, ok, err)
			}
			delete(pending, id)
		}
		var near, wheel []string
		for i := range 6 {
			near = append(near, put(Message{Topic: "t", Payload: fmt.Appendf(nil, "near-%d", i), DeliverAt: t0.Add(time.Duration(i) * 10 * time.Millisecond)}))
		}
		for i := range 12 {
			m := Message{Topic: "t", Payload: fmt.Appendf(nil, "wheel-%d", i), DeliverAt: t0.Add(2*time.Second + time.Duration(i)*500*time.Millisecond)}
			if i%3 == 0 {
				m.ID = fmt.Sprintf("user-%d", i)
			}
			wheel = append(wheel, put(m))
		}
		put(Message{ID: "user-far", Topic: "t", Payload: []byte("far chosen"), DeliverAt: t0.Add(25 * time.Second)})
		put(Message{Topic: "t", Payload: []byte("far generated"), DeliverAt: t0.Add(41 * time.Second)})
		put(Message{Topic: "big", Payload: bytes.Repeat([]byte("big!"), 2600), DeliverAt: t0.Add(4 * time.Second)})
		batch := []Message{
			{Topic: "b", Payload: []byte("batch-0"), DeliverAt: t0.Add(3 * time.Second)},
			{ID: "user-batch", Topic: "b", Payload: []byte("batch-1"), DeliverAt: t0.Add(6 * time.Second)},
			{Topic: "b", Payload: []byte("batch-2"), DeliverAt: t0.Add(30 * time.Second)},
		}
		ids, err := q.PutBatch(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range ids {
			pending[id] = want{batch[i].Topic, batch[i].DeliverAt, batch[i].Payload}
		}
		cancel(near[1])
		cancel(wheel[1])
		cancel(wheel[3]) // a chosen ID
		// A message nacked to its dead-letter topic.
		dl := put(Message{Topic: "dl", Payload: []byte("dead letter")})
		for range 2 {
			ds, err := q.Receive(ctx, "dl", 1, time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Nack(ctx, ds[0].Receipt, 0); err != nil {
				t.Fatal(err)
			}
		}
		pending[dl] = want{"dl.dead", time.Now(), []byte("dead letter")}
		// Two near messages acked, one leased when the files are taken.
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		ds, err := q.Receive(ctx, "t", 3, time.Hour)
		if err != nil || len(ds) != 3 {
			t.Fatalf("Receive: %d, %v", len(ds), err)
		}
		for _, d := range ds[:2] {
			if err := q.Ack(ctx, d.Receipt); err != nil {
				t.Fatal(err)
			}
			delete(pending, d.ID)
		}
		// Let the loader load the first slots of the wheel, then relocate lists of old segments.
		time.Sleep(2500 * time.Millisecond)
		synctest.Wait()
		if n, err := q.compact(newCompactor(), 2); err != nil || n == 0 {
			t.Fatalf("compaction: %d lists moved, %v", n, err)
		}
		if err := q.checkpoint(); err != nil {
			t.Fatal(err)
		}
		// After the checkpoint: more puts, a cancel, an ack and a nack for the replay.
		for i := range 4 {
			put(Message{Topic: "t", Payload: fmt.Appendf(nil, "after-%d", i), DeliverAt: time.Now().Add(time.Duration(i) * 3 * time.Second)})
		}
		put(Message{ID: "user-after", Topic: "t", Payload: []byte("after chosen"), DeliverAt: time.Now().Add(7 * time.Second)})
		cancel(wheel[5])
		ds, err = q.Receive(ctx, "t", 2, time.Hour)
		if err != nil || len(ds) != 2 {
			t.Fatalf("Receive: %d, %v", len(ds), err)
		}
		if err := q.Ack(ctx, ds[0].Receipt); err != nil {
			t.Fatal(err)
		}
		delete(pending, ds[0].ID)
		if err := q.Nack(ctx, ds[1].Receipt, 5*time.Second); err != nil {
			t.Fatal(err)
		}
		p := pending[ds[1].ID]
		p.due = time.Now().Add(5 * time.Second)
		pending[ds[1].ID] = p
		if err := q.log.WaitDurable(q.log.End()); err != nil {
			t.Fatal(err)
		}
		writeFixture := func(name string) {
			t.Helper()
			dst := filepath.Join(out, name)
			if err := os.RemoveAll(dst); err != nil {
				t.Fatal(err)
			}
			copyDir(t, dir, dst)
			os.Remove(filepath.Join(dst, "LOCK"))
			os.Remove(filepath.Join(dst, secretName))
			var b strings.Builder
			fmt.Fprintf(&b, "# id topic due-unix-nano payload-hex: the messages pending in this directory\n")
			for _, id := range slices.Sorted(mapKeys(pending)) {
				w := pending[id]
				fmt.Fprintf(&b, "%s %s %d %s\n", id, w.topic, w.due.UnixNano(), hex.EncodeToString(w.payload))
			}
			if err := os.WriteFile(filepath.Join(dst, "PENDING"), []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		writeFixture("crashed") // the log goes on after the checkpoint
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		writeFixture("closed") // the final checkpoint covers everything
	})
}
