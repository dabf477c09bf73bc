package delayq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/internal/testlong"
	"github.com/tockwheel/tock/queue/queuetest"
)

// TestDueCountsMatchModel runs random puts (due now, in the near window, within the horizon and
// beyond it, with generated and chosen IDs), cancels, deliveries acked or nacked with a delay,
// the passing of time, clean reopens and simulated crashes, and after every step compares
// DueCounts over the horizon with queuetest's model: 2 runs of 300 steps, 6 in long mode. Set
// DELAYQ_SEED to repeat a run.
func TestDueCountsMatchModel(t *testing.T) {
	seed := testSeed(t)
	for run := range testlong.Pick(2, 6) {
		t.Run(fmt.Sprint(run), func(t *testing.T) {
			dueCountsOps(t, rand.New(rand.NewPCG(seed, uint64(run))), t.TempDir())
		})
	}
}

func dueCountsOps(t *testing.T, rng *rand.Rand, base string) {
	const (
		slot    = 100 * time.Millisecond
		horizon = 3 * time.Second
		steps   = int(horizon / slot)
	)
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		opts := []Option{WithSlot(slot), WithHorizon(horizon), WithSegmentSize(8 << 10),
			WithCheckpointInterval(700 * time.Millisecond), WithMaxAttempts(0), WithLogger(quiet)}
		dir := filepath.Join(base, "q0")
		q := open(t, dir, opts...)
		// No slack: due times are whole milliseconds, so that the in-memory wheel's millisecond
		// timers count each message in the step of its exact DeliverAt.
		m := queuetest.NewModel(0, 0)
		nextUser := 0
		for step := range 300 {
			var what string
			now := queuetest.At(time.Now())
			var err error // the model's verdict on the step
			switch op := rng.IntN(100); {
			case op < 45:
				what = "put"
				var delay time.Duration
				switch rng.IntN(4) {
				case 0:
					delay = time.Duration(rng.IntN(400)-200) * time.Millisecond
				case 1:
					delay = time.Duration(rng.IntN(3000)) * time.Millisecond
				default:
					delay = time.Duration(rng.IntN(12000)) * time.Millisecond
				}
				msg := Message{Topic: "t", DeliverAt: now.Start.Add(delay)}
				if rng.IntN(4) == 0 {
					nextUser++
					msg.ID = fmt.Sprintf("user-%d", nextUser)
				}
				id, perr := q.Put(ctx, msg)
				err = m.Put(msg, id, perr, now)
			case op < 55:
				what = "cancel"
				ids := m.IDs()
				if len(ids) == 0 {
					continue
				}
				id := ids[rng.IntN(len(ids))]
				ok, cerr := q.Cancel(ctx, id)
				err = m.Cancel(id, ok, cerr, now)
			case op < 70:
				what = "receive"
				max := 1 + rng.IntN(10)
				rctx, cancel := context.WithTimeout(ctx, time.Duration(rng.IntN(300))*time.Millisecond)
				ds, rerr := q.Receive(rctx, "t", max, time.Hour)
				cancel()
				now = queuetest.Span{Start: now.Start, End: time.Now()}
				if err = m.Receive("t", max, time.Hour, ds, rerr, now); err != nil {
					break
				}
				for _, d := range ds {
					if rng.IntN(3) == 0 {
						delay := time.Duration(rng.IntN(5000)) * time.Millisecond
						err = errors.Join(err, m.Nack(d.Receipt, delay, false, q.Nack(ctx, d.Receipt, delay), now))
					} else {
						err = errors.Join(err, m.Ack([]string{d.Receipt}, q.Ack(ctx, d.Receipt), now))
					}
				}
			case op < 90:
				what = "sleep"
				time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
			case op < 95:
				what = "reopen"
				if err := q.Close(); err != nil {
					t.Fatal(err)
				}
				q = open(t, dir, opts...)
				m.LeasesLost(queuetest.At(time.Now()))
			default:
				what = "crash"
				crashed := filepath.Join(base, fmt.Sprintf("crash%d", step))
				crashCopy(t, rng, q, dir, crashed)
				dir = crashed
				q = open(t, dir, opts...)
				m.LeasesLost(queuetest.At(time.Now()))
			}
			if err != nil {
				t.Fatalf("step %d (%s): %v", step, what, err)
			}
			synctest.Wait()
			// From the next slot edge: a slot still on disk counts in the step of its start.
			from := time.Now().Truncate(slot).Add(slot)
			if err := m.CheckDueCounts(from, slot, dueCounts(q, from, slot, steps), queuetest.At(time.Now())); err != nil {
				t.Fatalf("step %d (after %s): %v", step, what, err)
			}
		}
	})
}

// TestDueCountsAcrossRestart checks the counts of a thousand messages spread over an hour, in
// one-second slots, right after Put, after a clean reopen, and after a crash copy of the
// directory with its log replayed from an old checkpoint.
func TestDueCountsAcrossRestart(t *testing.T) {
	base := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		dir := filepath.Join(base, "q")
		opts := []Option{WithCheckpointInterval(time.Hour)}
		q := open(t, dir, opts...)
		rng := rand.New(rand.NewPCG(7, 8))
		m := queuetest.NewModel(0, 0)
		start := time.Now()
		msgs := make([]Message, 1000)
		for i := range msgs {
			msgs[i] = Message{Topic: "t", DeliverAt: start.Add(time.Duration(rng.IntN(3600*1000)) * time.Millisecond)}
		}
		ids, err := q.PutBatch(ctx, msgs)
		if err := m.PutBatch(msgs, ids, err, queuetest.At(start)); err != nil {
			t.Fatal(err)
		}
		cancel := func(ids []string) {
			t.Helper()
			for _, id := range ids {
				ok, err := q.Cancel(ctx, id)
				if err := m.Cancel(id, ok, err, queuetest.At(time.Now())); err != nil {
					t.Fatal(err)
				}
			}
		}
		cancel(ids[:100])
		compare := func(when string) {
			t.Helper()
			synctest.Wait()
			from := time.Now().Truncate(time.Second).Add(time.Second)
			got := dueCounts(q, from, time.Second, 3600)
			if err := m.CheckDueCounts(from, time.Second, got, queuetest.At(time.Now())); err != nil {
				t.Fatalf("%s: %v", when, err)
			}
			if total, pending := sum(got), len(m.Pending()); total < pending/2 {
				t.Fatalf("%s: %d messages counted of %d pending", when, total, pending)
			}
		}
		compare("after Put")
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		q = open(t, dir, opts...)
		compare("after reopen")

		// The checkpoint is an hour apart: a crash now replays everything since the reopen.
		cancel(ids[100:150])
		if err := q.log.WaitWritten(q.log.End()); err != nil {
			t.Fatal(err)
		}
		crashed := filepath.Join(base, "crashed")
		copyDir(t, dir, crashed)
		q.Close()
		q = open(t, crashed, opts...)
		compare("after a crash")

		// Ten minutes on, the first slots have been loaded into memory and delivered.
		time.Sleep(10 * time.Minute)
		for {
			rctx, cancel := context.WithTimeout(ctx, time.Millisecond)
			ds, err := q.Receive(rctx, "t", 1000, time.Hour)
			cancel()
			if err := m.Receive("t", 1000, time.Hour, ds, err, queuetest.At(time.Now())); err != nil {
				t.Fatal(err)
			}
			if len(ds) == 0 {
				break
			}
			for _, d := range ds {
				if err := m.Ack([]string{d.Receipt}, q.Ack(ctx, d.Receipt), queuetest.At(time.Now())); err != nil {
					t.Fatal(err)
				}
			}
		}
		compare("ten minutes on")
	})
}

// TestOlderCheckpoints rewrites a checkpoint in the formats of versions 1 to 3, one snapshot per
// file: version 1 lacks the per-slot counts, versions 1 and 2 count cancelled messages among those
// in the disk wheel, and none has the lists' first records or the chosen IDs' records. Open must
// learn them all from the lists, and chosen IDs must still be unique.
func TestOlderCheckpoints(t *testing.T) {
	for _, version := range []uint32{1, 2, 3} {
		t.Run(fmt.Sprintf("version=%d", version), func(t *testing.T) {
			base := t.TempDir()
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				dir := filepath.Join(base, "q")
				q := open(t, dir)
				start := time.Now()
				var ids []string
				for i := range 50 {
					id, err := q.Put(ctx, Message{ID: fmt.Sprintf("u%d", i%3*1000+i), Topic: "t", DeliverAt: start.Add(time.Duration(i%7+3) * time.Second)})
					if err != nil {
						t.Fatal(err)
					}
					ids = append(ids, id)
				}
				const cancelled = 10
				for _, id := range ids[:cancelled] {
					if ok, err := q.Cancel(ctx, id); !ok || err != nil {
						t.Fatalf("Cancel(%s) = %v, %v", id, ok, err)
					}
				}
				from := start.Truncate(time.Second).Add(time.Second)
				want := dueCounts(q, from, time.Second, 20)
				pending := q.Snapshot().Pending
				if pending != 50-cancelled {
					t.Fatalf("Pending %d after 50 puts and %d cancels", pending, cancelled)
				}
				if err := q.Close(); err != nil {
					t.Fatal(err)
				}
				path := filepath.Join(dir, checkpointName)
				b, err := os.ReadFile(path)
				if err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, checkpointAsVersion(t, path, b, version, cancelled), 0o644); err != nil {
					t.Fatal(err)
				}
				q = open(t, dir)
				if got := dueCounts(q, from, time.Second, 20); !slices.Equal(got, want) {
					t.Fatalf("after a version %d checkpoint: got %v, want %v", version, got, want)
				}
				if got := q.Snapshot().Pending; got != pending {
					t.Fatalf("after a version %d checkpoint: Pending %d, want %d", version, got, pending)
				}
				check(t, q)
				if _, err := q.Put(ctx, Message{ID: ids[cancelled], Topic: "t", Payload: []byte("other")}); !errors.Is(err, ErrDuplicate) {
					t.Fatalf("after a version %d checkpoint: Put of a pending ID: %v", version, err)
				}
			})
		})
	}
}

// checkpointAsVersion rewrites a checkpoint file in the format of an older version: one full
// snapshot, whose disk wheel's message count includes the cancelled messages for versions 1 and 2
// (as they kept it), without the heads' due counts for version 1.
func checkpointAsVersion(t *testing.T, path string, b []byte, version uint32, cancelled int) []byte {
	t.Helper()
	ck, err := decodeCheckpoint(path, b)
	if err != nil {
		t.Fatal(err)
	}
	pending := ck.pending
	if version < 3 {
		pending += int64(cancelled)
	}
	var heads []slotList
	for _, l := range ck.lists {
		if l.head != 0 {
			heads = append(heads, l)
		}
	}
	if len(heads) == 0 {
		t.Fatal("checkpoint has no lists: the test puts nothing on disk")
	}
	s := &format.Snapshot{Version: version, Replay: ck.replay, SlotNs: ck.slotNs, Slots: ck.slots, Loaded: ck.loaded, Pending: pending}
	for _, l := range heads {
		s.Heads = append(s.Heads, format.Head{Slot: l.slot, Head: l.head, Due: l.due})
	}
	for seg, n := range ck.pins {
		s.Pins = append(s.Pins, format.Pin{Segment: seg, Count: n})
	}
	for _, e := range ck.entries {
		s.Entries = append(s.Entries, format.Entry{Pos: e.pos, Origin: e.origin, DeliverAt: e.deliverAt, Attempt: e.attempt, Topic: e.topic})
	}
	for id, loc := range ck.ids {
		s.IDs = append(s.IDs, format.ID{ID: id, Slot: loc.slot})
	}
	out, err := format.AppendSnapshot(nil, s)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// BenchmarkDueCounts measures an hour's forecast, second by second, of a queue holding 100k
// messages spread over a day, beside Stats (what a status poll calls anyway) as the anchor.
func BenchmarkDueCounts(b *testing.B) {
	q, err := Open(b.TempDir(), WithLogger(quiet), WithNoSync())
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	rng := rand.New(rand.NewPCG(1, 1))
	now := time.Now()
	msgs := make([]Message, 1000)
	for range 100 {
		for i := range msgs {
			msgs[i] = Message{Topic: "t", DeliverAt: now.Add(time.Duration(rng.Int64N(int64(24 * time.Hour))))}
		}
		if _, err := q.PutBatch(context.Background(), msgs); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("DueCounts", func(b *testing.B) {
		for b.Loop() {
			dueCounts(q, time.Now(), time.Second, 3600)
		}
	})
	b.Run("Stats", func(b *testing.B) {
		for b.Loop() {
			q.Snapshot()
		}
	})
}

// dueCounts returns q's DueCounts, which never fail.
func dueCounts(q *Queue, from time.Time, step time.Duration, n int) []int {
	counts, _ := q.DueCounts(context.Background(), from, step, n)
	return counts
}
