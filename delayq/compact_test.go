package delayq

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/delayq/internal/wal"
)

// compactOpts are options for tests that run compaction rounds themselves: the background
// compactor and checkpointer stay out of the way.
var compactOpts = []Option{WithSlot(100 * time.Millisecond), WithHorizon(10 * time.Second), WithSegmentSize(4 << 10),
	WithCheckpointInterval(time.Hour), WithCompaction(0, 0), WithMaxAttempts(0)}

// fillCompactable puts messages due 5s to 25s ahead (beyond the horizon too, so some are rolled
// copies' lists), a quarter with chosen IDs, cancels every fourth, and pads the log with messages
// acked at once, so the old segments are mostly dead. It returns the due times of the messages
// that must be delivered.
func fillCompactable(t *testing.T, q *Queue) map[string]time.Time {
	t.Helper()
	ctx := context.Background()
	want := make(map[string]time.Time)
	for i := range 80 {
		m := Message{Topic: "t", Payload: []byte(fmt.Sprintf("message %d", i)), DeliverAt: time.Now().Add(5*time.Second + time.Duration(i)*250*time.Millisecond)}
		if i%4 == 1 {
			m.ID = fmt.Sprintf("user-%d", i)
		}
		id, err := q.Put(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		want[id] = m.DeliverAt
		if i%4 == 3 || i%8 == 1 {
			if ok, err := q.Cancel(ctx, id); err != nil || !ok {
				t.Fatalf("Cancel(%s) = %v, %v", id, ok, err)
			}
			delete(want, id)
		}
		for range 3 {
			if _, err := q.Put(ctx, Message{Topic: "pad", Payload: make([]byte, 100)}); err != nil {
				t.Fatal(err)
			}
			ds, err := q.Receive(ctx, "pad", 1, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Ack(ctx, ds[0].Receipt); err != nil {
				t.Fatal(err)
			}
		}
	}
	return want
}

// drainExactly receives everything q delivers within a minute and checks that it is exactly want,
// each message once and none early.
func drainExactly(t *testing.T, q *Queue, want map[string]time.Time) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	got := make(map[string]bool)
	for {
		ds, err := q.Receive(ctx, "t", 100, time.Hour)
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			at, ok := want[d.ID]
			switch {
			case !ok:
				t.Fatalf("%s delivered: cancelled or unknown", d.ID)
			case got[d.ID]:
				t.Fatalf("%s delivered twice", d.ID)
			case time.Now().Before(at):
				t.Fatalf("%s delivered %v early", d.ID, at.Sub(time.Now()))
			}
			got[d.ID] = true
		}
	}
	if len(got) != len(want) {
		for id := range want {
			if !got[id] {
				t.Fatalf("%d of %d messages delivered; %s missing", len(got), len(want), id)
			}
		}
	}
}

// cutLog does to a copied queue directory what a crash at position p may leave: the log ends at p.
func cutLog(t *testing.T, dir string, p wal.Pos) {
	t.Helper()
	forSegments(t, dir, func(seg uint32, path string) {
		switch {
		case seg > p.Segment():
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
		case seg == p.Segment():
			if err := os.Truncate(path, int64(p.Offset())); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestCompactCrash relocates lists and then reopens the queue as a crash would leave it at every
// record boundary of the relocation (before and after the Relocate record and each copy), and
// after the checkpoint that follows and the retention that deletes the old segments. Every time,
// exactly the messages put and not cancelled are delivered, each once.
func TestCompactCrash(t *testing.T) {
	base := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		dir := filepath.Join(base, "q")
		q := open(t, dir, compactOpts...)
		want := fillCompactable(t, q)
		if err := q.checkpoint(); err != nil {
			t.Fatal(err)
		}
		start := q.log.End()
		moved, err := q.compact(newCompactor(), 2)
		if err != nil {
			t.Fatal(err)
		}
		if moved == 0 {
			t.Fatal("nothing relocated")
		}
		check(t, q)
		if err := q.log.WaitDurable(q.log.End()); err != nil {
			t.Fatal(err)
		}
		var cuts []wal.Pos
		relocates := 0
		err = scanRecords(q.log, start, 0, func(p wal.Pos, rec *format.Record) error {
			cuts = append(cuts, p)
			if rec.Kind == format.KindRelocate {
				relocates++
			}
			return nil
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if relocates != moved {
			t.Fatalf("%d lists relocated, %d Relocate records", moved, relocates)
		}
		cuts = append(cuts, q.log.End())
		t.Logf("%d lists relocated in %d records; %d messages pending", moved, len(cuts)-1, len(want))
		// Each crash drains a copy, so time moves on; the copies are taken first.
		segsBefore, _ := q.log.Segments()
		for i, cut := range cuts {
			crashed := filepath.Join(base, fmt.Sprint("cut", i))
			copyDir(t, dir, crashed)
			cutLog(t, crashed, cut)
		}
		if err := q.checkpoint(); err != nil {
			t.Fatal(err)
		}
		segsAfter, _ := q.log.Segments()
		if segsAfter[0] == segsBefore[0] {
			t.Fatalf("segment %d kept after compaction", segsBefore[0])
		}
		copyDir(t, dir, filepath.Join(base, "checkpointed"))
		for i := range cuts {
			q2 := open(t, filepath.Join(base, fmt.Sprint("cut", i)), compactOpts...)
			check(t, q2)
			drainExactly(t, q2, want)
			if err := q2.Close(); err != nil {
				t.Fatal(err)
			}
		}
		q2 := open(t, filepath.Join(base, "checkpointed"), compactOpts...)
		drainExactly(t, q2, want)
		q2.Close()
		drainExactly(t, q, want)
		check(t, q)
	})
}

// ackDueNow receives up to 100 messages of topic that are due now and acks them, and returns how
// many there were.
func ackDueNow(t *testing.T, q *Queue, topic string) int {
	t.Helper()
	ctx := context.Background()
	rctx, cancel := context.WithTimeout(ctx, time.Millisecond)
	ds, _ := q.Receive(rctx, topic, 100, time.Hour)
	cancel()
	for _, d := range ds {
		if err := q.Ack(ctx, d.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	return len(ds)
}

// TestCompactPolicy checks which segments a round compacts: one mostly dead whose remaining
// messages wait long (moved, and the segment deleted at the next checkpoint), one mostly dead
// whose remaining messages are due soon compared with its age (left to empty by itself), and one
// mostly live (left alone).
func TestCompactPolicy(t *testing.T) {
	for _, c := range []struct {
		name       string
		early      int           // messages due after 30 minutes, acked then
		late       int           // messages due later
		lateDelay  time.Duration // when the late ones are due
		wantMoving bool
	}{
		{"mostly dead, rest due in hours", 27, 3, 2 * time.Hour, true},
		{"mostly dead, rest due soon", 24, 6, 33 * time.Minute, false},
		{"mostly live", 3, 27, 2 * time.Hour, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				q := open(t, dir, WithSegmentSize(4<<10), WithCheckpointInterval(time.Hour), WithCompaction(0, 0))
				comp := newCompactor()
				start := time.Now()
				want := make(map[string]time.Time)
				for i := range c.early + c.late {
					at := start.Add(30*time.Minute + time.Duration(i)*time.Second)
					if n := c.early + c.late; i*c.late/n != (i+1)*c.late/n { // c.late of them, spread
						at = start.Add(c.lateDelay + time.Duration(i)*time.Second)
					}
					id, err := q.Put(ctx, Message{Topic: "t", Payload: make([]byte, 100), DeliverAt: at})
					if err != nil {
						t.Fatal(err)
					}
					if at.Sub(start) > 31*time.Minute {
						want[id] = at
					}
				}
				// Messages of another topic close the first segment.
				for q.log.End().Segment() < 3 {
					if _, err := q.Put(ctx, Message{Topic: "later", Payload: make([]byte, 100), DeliverAt: start.Add(5 * time.Hour)}); err != nil {
						t.Fatal(err)
					}
				}
				if n, err := q.compact(comp, 0.5); err != nil || n != 0 {
					t.Fatalf("compaction of fresh segments: %d lists moved, %v", n, err)
				}
				time.Sleep(31 * time.Minute)
				if n := ackDueNow(t, q, "t"); n != c.early {
					t.Fatalf("%d messages due after 31 minutes, want %d", n, c.early)
				}
				moved, err := q.compact(comp, 0.5)
				if err != nil {
					t.Fatal(err)
				}
				if (moved > 0) != c.wantMoving {
					t.Fatalf("%d lists moved", moved)
				}
				if err := q.checkpoint(); err != nil {
					t.Fatal(err)
				}
				if segs, _ := q.log.Segments(); (segs[0] != 1) != c.wantMoving {
					t.Fatalf("segments %v after compaction", segs)
				}
				check(t, q)
				time.Sleep(c.lateDelay)
				drainExactly(t, q, want)
			})
		})
	}
}
