package delayq

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/queue"
)

// receiveOne receives one message of topic, failing if none comes within wait.
func receiveOne(t *testing.T, q *Queue, topic string, wait, visibility time.Duration) Delivery {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ds, err := q.Receive(ctx, topic, 1, visibility)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Receive(%s): %d deliveries, %v", topic, len(ds), err)
	}
	return ds[0]
}

func TestLeaseExpiryBackoffAndDeadLetter(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, dir, WithMaxAttempts(3), WithBackoff(time.Second, 10*time.Second))
		id, err := q.Put(ctx, Message{Topic: "jobs", Payload: []byte("p")})
		if err != nil {
			t.Fatal(err)
		}
		// Attempt 1 expires after the 5s visibility; attempt 2 comes 1s (first backoff) later.
		d := receiveOne(t, q, "jobs", time.Second, 5*time.Second)
		start := time.Now()
		if d.Attempt != 1 || d.ID != id {
			t.Fatalf("first delivery %+v", d)
		}
		d = receiveOne(t, q, "jobs", time.Minute, 5*time.Second)
		if d.Attempt != 2 || time.Since(start) != 6*time.Second {
			t.Fatalf("second delivery attempt %d after %v; want 2 after 6s", d.Attempt, time.Since(start))
		}
		if err := q.Ack(ctx, d.Receipt); err != nil {
			t.Fatalf("ack: %v", err)
		}
		// A second message nacked to exhaustion goes to the dead-letter topic.
		id2, _ := q.Put(ctx, Message{Topic: "jobs", Payload: []byte("q")})
		for attempt := 1; attempt <= 3; attempt++ {
			d := receiveOne(t, q, "jobs", time.Minute, time.Minute)
			if d.ID != id2 || d.Attempt != attempt {
				t.Fatalf("delivery %+v, want attempt %d of %s", d, attempt, id2)
			}
			if err := q.Nack(ctx, d.Receipt, 2*time.Second); err != nil {
				t.Fatal(err)
			}
			if err := q.Nack(ctx, d.Receipt, 0); !errors.Is(err, ErrUnknownReceipt) {
				t.Fatalf("second nack: %v", err)
			}
		}
		d = receiveOne(t, q, "jobs.dead", time.Second, time.Minute)
		if d.ID != id2 || d.Attempt != 1 || string(d.Payload) != "q" {
			t.Fatalf("dead letter %+v", d)
		}
		if st := q.Snapshot(); st.DeadLettered != 1 || st.Nacked != 3 || st.Expired != 1 || st.Leased != 1 {
			t.Fatalf("stats %+v", st)
		}
		// The dead letter survives a restart on its dead-letter topic.
		q.Close()
		q = open(t, dir, WithMaxAttempts(3))
		if d := receiveOne(t, q, "jobs.dead", time.Second, time.Minute); d.ID != id2 {
			t.Fatalf("after reopen: %+v", d)
		}
		check(t, q)
	})
}

func TestAckStaleReceipt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, t.TempDir(), WithBackoff(time.Second, time.Second))
		q.Put(ctx, Message{Topic: "t"})
		first := receiveOne(t, q, "t", time.Second, time.Second)
		second := receiveOne(t, q, "t", time.Minute, time.Minute) // after expiry and backoff
		if first.Receipt == second.Receipt || second.Attempt != 2 {
			t.Fatalf("redelivery %+v of %+v", second, first)
		}
		err := q.Ack(ctx, first.Receipt, "garbage", second.Receipt)
		if !errors.Is(err, ErrUnknownReceipt) {
			t.Fatalf("ack with stale and malformed receipts: %v", err)
		}
		if st := q.Snapshot(); st.Acked != 1 || st.Leased != 0 {
			t.Fatalf("the good receipt was not acked: %+v", st)
		}
	})
}

// TestNeverEarlyAcrossSlotEdges puts messages on both sides of every slot edge of a few slots,
// and at the far edge of the horizon, and checks each arrives at its time to the millisecond.
func TestNeverEarlyAcrossSlotEdges(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, t.TempDir(), WithSlot(time.Second), WithHorizon(10*time.Second), WithPreload(time.Second))
		base := time.Now().Truncate(time.Second).Add(3 * time.Second)
		var times []time.Time
		for _, edge := range []time.Duration{0, time.Second, 2 * time.Second, 10 * time.Second, 11 * time.Second, 20 * time.Second, time.Hour} {
			for _, d := range []time.Duration{-time.Millisecond, -time.Nanosecond, 0, time.Nanosecond, time.Millisecond} {
				times = append(times, base.Add(edge+d))
			}
		}
		want := map[string]time.Time{}
		for _, at := range times {
			id, err := q.Put(ctx, Message{Topic: "t", DeliverAt: at})
			if err != nil {
				t.Fatal(err)
			}
			want[id] = at
		}
		for len(want) > 0 {
			d := receiveOne(t, q, "t", 2*time.Hour, time.Hour)
			at := want[d.ID]
			delete(want, d.ID)
			if late := time.Since(at); late < 0 || late > time.Millisecond {
				t.Errorf("message due %v delivered %v late", at.Sub(base), late)
			}
			q.Ack(ctx, d.Receipt)
		}
		check(t, q)
	})
}

func TestCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, t.TempDir(), WithHorizon(time.Minute))
		now := time.Now()
		ids := map[string]string{}
		for _, c := range []struct {
			name, id string
			delay    time.Duration
		}{
			{"near", "", 500 * time.Millisecond}, {"wheel", "", 30 * time.Second}, {"beyond horizon", "", 10 * time.Minute},
			{"user near", "u1", 500 * time.Millisecond}, {"user wheel", "u2", 30 * time.Second}, {"user beyond", "u3", 10 * time.Minute},
		} {
			id, err := q.Put(ctx, Message{ID: c.id, Topic: "t", DeliverAt: now.Add(c.delay)})
			if err != nil {
				t.Fatal(err)
			}
			ids[c.name] = id
		}
		keep, _ := q.Put(ctx, Message{Topic: "t", DeliverAt: now.Add(10 * time.Minute)})
		for name, id := range ids {
			if ok, err := q.Cancel(ctx, id); !ok || err != nil {
				t.Fatalf("Cancel %s = %v, %v", name, ok, err)
			}
			if ok, err := q.Cancel(ctx, id); ok || err != nil {
				t.Fatalf("second Cancel %s = %v, %v", name, ok, err)
			}
		}
		for _, id := range []string{"", "nope", "u4", makeID(now.Add(30*time.Second).UnixNano(), 1<<32|999)} {
			if ok, err := q.Cancel(ctx, id); ok || err != nil {
				t.Fatalf("Cancel(%q) of a message never put = %v, %v", id, ok, err)
			}
		}
		check(t, q)
		d := receiveOne(t, q, "t", time.Hour, time.Minute)
		if d.ID != keep {
			t.Fatalf("delivered %s, a cancelled message", d.ID)
		}
		if st := q.Snapshot(); st.Cancelled != 6 || st.Pending != 0 {
			t.Fatalf("stats %+v", st)
		}
		check(t, q)
	})
}

func TestInvalidArguments(t *testing.T) {
	ctx := context.Background()
	q := open(t, t.TempDir(), WithMaxPayload(10))
	defer q.Close()
	for _, m := range []Message{{}, {Topic: string(make([]byte, 70000))}} {
		if _, err := q.Put(ctx, m); !errors.Is(err, ErrInvalid) {
			t.Errorf("Put(topic %d bytes, payload %d): %v", len(m.Topic), len(m.Payload), err)
		}
	}
	if _, err := q.Put(ctx, Message{Topic: "t", Payload: make([]byte, 11)}); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Put of a payload over the limit: %v; want ErrTooLarge", err)
	}
	if _, err := q.PutBatch(ctx, []Message{{Topic: "t"}, {}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("PutBatch with a bad message: %v", err)
	}
	if st := q.Snapshot(); st.Puts != 0 {
		t.Errorf("a rejected batch stored %d messages", st.Puts)
	}
	if _, err := q.Receive(ctx, "t", 0, time.Second); !errors.Is(err, ErrInvalid) {
		t.Errorf("Receive max 0: %v", err)
	}
	if _, err := q.Receive(ctx, "t", 1, 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("Receive visibility 0: %v", err)
	}
	if _, err := Open(t.TempDir(), WithSlot(time.Microsecond)); !errors.Is(err, ErrInvalid) {
		t.Errorf("Open with a 1µs slot: %v", err)
	}
}

func TestOpenLockedAndClose(t *testing.T) {
	dir := t.TempDir()
	q := open(t, dir)
	if _, err := Open(dir); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v", err)
	}
	done := make(chan error)
	go func() {
		_, err := q.Receive(context.Background(), "t", 1, time.Second)
		done <- err
	}()
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("Receive during Close: %v", err)
	}
	if err := q.Close(); !errors.Is(err, ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := q.Put(context.Background(), Message{Topic: "t"}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Put after Close: %v", err)
	}
	q = open(t, dir)
	q.Close()
}

// TestRetention puts and acks far more data than stays live and checks that disk use follows
// the live data: segments whose messages are all done are deleted after a checkpoint.
func TestRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, t.TempDir(), WithSegmentSize(64<<10), WithCheckpointInterval(time.Second))
		payload := make([]byte, 100)
		far, _ := q.Put(ctx, Message{Topic: "far", DeliverAt: time.Now().Add(48 * time.Hour)})
		for round := range 50 {
			var batch []Message
			for i := range 200 {
				batch = append(batch, Message{Topic: "t", Payload: payload, DeliverAt: time.Now().Add(time.Duration(i%20) * time.Second)})
			}
			if _, err := q.PutBatch(ctx, batch); err != nil {
				t.Fatal(err)
			}
			for got := 0; got < len(batch); {
				ds, err := q.Receive(ctx, "t", 100, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				var rs []string
				for _, d := range ds {
					rs = append(rs, d.Receipt)
				}
				if err := q.Ack(ctx, rs...); err != nil {
					t.Fatal(err)
				}
				got += len(ds)
			}
			if round%10 == 9 {
				check(t, q)
			}
		}
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if err := q.checkpoint(); err != nil {
			t.Fatal(err)
		}
		st := q.Snapshot()
		written := int64(50 * 200 * 150)
		if st.DiskBytes > written/10 || st.Segments > 3 {
			t.Fatalf("after writing ~%d bytes and acking all but one message: %d segments, %d bytes", written, st.Segments, st.DiskBytes)
		}
		if ok, err := q.Cancel(ctx, far); !ok || err != nil {
			t.Fatalf("the one live message was lost: %v %v", ok, err)
		}
		t.Logf("%d segments, %d bytes on disk", st.Segments, st.DiskBytes)
	})
}

func TestReceiptFromBeforeRestartIsStale(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	q := open(t, dir)
	q.Put(ctx, Message{Topic: "t"})
	before := receiveOne(t, q, "t", time.Second, time.Minute)
	q.Close()
	q = open(t, dir)
	after := receiveOne(t, q, "t", time.Second, time.Minute)
	if err := q.Ack(ctx, before.Receipt); !errors.Is(err, ErrUnknownReceipt) {
		t.Fatalf("a receipt from before the restart acked the new lease: %v", err)
	}
	if err := q.Ack(ctx, after.Receipt); err != nil {
		t.Fatal(err)
	}
}

func TestDeliverAtLimits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, t.TempDir())
		if _, err := q.Put(ctx, Message{Topic: "t", DeliverAt: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("DeliverAt in the year 3000: %v", err)
		}
		for _, at := range []time.Time{{}, time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC)} {
			if _, err := q.Put(ctx, Message{Topic: "t", DeliverAt: at}); err != nil {
				t.Fatal(err)
			}
			if d := receiveOne(t, q, "t", time.Millisecond, time.Minute); d.Attempt != 1 {
				t.Fatalf("delivery %+v", d)
			}
		}
		id, err := q.Put(ctx, Message{Topic: "t", DeliverAt: time.Date(2200, 1, 1, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			t.Fatal(err)
		}
		if ok, _ := q.Cancel(ctx, id); !ok {
			t.Fatal("could not cancel a message due in 2200")
		}
		check(t, q)
	})
}

// TestCancelRacingRollKeepsList is the regression test of a Cancel that read a list without the
// lock while the loader loaded that list and rolled its far message into the next lap's list, at
// the same wheel index: on re-locking, Cancel's look at the old list emptied the index, and the
// new list with every message in it was lost.
func TestCancelRacingRollKeepsList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, t.TempDir(), WithSlot(time.Second), WithHorizon(10*time.Second), WithPreload(time.Second))
		now := time.Now()
		far, _ := q.Put(ctx, Message{Topic: "t", DeliverAt: now.Add(25 * time.Second)})
		other, _ := q.Put(ctx, Message{Topic: "t", DeliverAt: now.Add(25*time.Second + time.Millisecond)})
		var fired atomic.Bool
		q.mu.Lock()
		q.afterListRead = func() {
			// The first read is Cancel's: let the loader load far's list (the slot 10 laps before
			// it) and roll it forward meanwhile.
			if fired.CompareAndSwap(false, true) {
				time.Sleep(12 * time.Second)
				synctest.Wait()
			}
		}
		q.mu.Unlock()
		if ok, err := q.Cancel(ctx, far); !ok || err != nil {
			t.Fatalf("Cancel = %v, %v", ok, err)
		}
		check(t, q)
		d := receiveOne(t, q, "t", time.Minute, time.Minute)
		if d.ID != other {
			t.Fatalf("delivered %s, want %s", d.ID, other)
		}
	})
}

// TestReplayCatchesUpLoaded is the regression test of a recovery that took how far the wheel
// had loaded from the checkpoint alone. The loader passes empty slots without writing to the log,
// so a list written after the checkpoint could lie beyond the recovered horizon, and the next Put
// for the same wheel index emptied it.
func TestReplayCatchesUpLoaded(t *testing.T) {
	base := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		opts := []Option{WithSlot(time.Second), WithHorizon(10 * time.Second), WithCheckpointInterval(time.Hour)}
		dir := filepath.Join(base, "q")
		q := open(t, dir, opts...)
		time.Sleep(30 * time.Second) // the loader passes 30 empty slots; no checkpoint records it
		synctest.Wait()
		a, _ := q.Put(ctx, Message{Topic: "t", DeliverAt: time.Now().Add(9 * time.Second)})
		crashed := filepath.Join(base, "crashed")
		q.log.WaitDurable(q.log.End())
		copyDir(t, dir, crashed)
		q.Close()

		q = open(t, crashed, opts...)
		check(t, q)
		b, _ := q.Put(ctx, Message{Topic: "t", DeliverAt: time.Now().Add(9*time.Second + 500*time.Millisecond)})
		check(t, q)
		for _, want := range []string{a, b} {
			if d := receiveOne(t, q, "t", time.Minute, time.Minute); d.ID != want {
				t.Fatalf("delivered %s, want %s", d.ID, want)
			}
		}
	})
}

// TestPayloadBuffersAreNotShared is the regression test of a message due at once keeping the
// producer's payload slice, so that reusing the buffer after Put changed the message.
func TestPayloadBuffersAreNotShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, t.TempDir())
		buf := []byte("first")
		q.Put(ctx, Message{Topic: "t", Payload: buf})
		copy(buf, "XXXXX")
		d := receiveOne(t, q, "t", time.Second, time.Millisecond)
		if string(d.Payload) != "first" {
			t.Fatalf("payload %q after the producer reused its buffer", d.Payload)
		}
		copy(d.Payload, "YYYYY")
		d = receiveOne(t, q, "t", time.Minute, time.Minute) // redelivered after the lease ran out
		if string(d.Payload) != "first" {
			t.Fatalf("payload %q after the consumer wrote to its copy", d.Payload)
		}
	})
}

// TestTopicTooLongForItsDeadLetterTopic is the regression test of a topic short enough for Put but
// too long once the dead-letter suffix was added: the message's last failed delivery appended an
// Update record the log refused, and that failure stopped the whole queue. Put now refuses such a
// topic, and one just short enough is dead-lettered with the queue still working.
func TestTopicTooLongForItsDeadLetterTopic(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, t.TempDir(), WithMaxAttempts(1))
		long := strings.Repeat("t", format.MaxName-len(DefaultDeadLetterSuffix)+1)
		if _, err := q.Put(ctx, Message{Topic: long}); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Put of a %d-byte topic: %v, want ErrInvalid", len(long), err)
		}
		topic := long[1:]
		id, err := q.Put(ctx, Message{Topic: topic})
		if err != nil {
			t.Fatal(err)
		}
		d := receiveOne(t, q, topic, time.Second, time.Minute)
		if err := q.Nack(ctx, d.Receipt, 0); err != nil {
			t.Fatalf("Nack to the dead-letter topic: %v", err)
		}
		if d := receiveOne(t, q, topic+DefaultDeadLetterSuffix, time.Second, time.Minute); d.ID != id {
			t.Fatalf("dead letter %q, want %q", d.ID, id)
		}
		if _, err := q.Put(ctx, Message{Topic: "t"}); err != nil {
			t.Fatalf("Put after the dead letter: %v", err)
		}
		check(t, q)
	})
	if _, err := Open(t.TempDir(), WithDeadLetterTopic(strings.Repeat("d", format.MaxName+1))); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Open with a dead-letter topic over %d bytes: %v", format.MaxName, err)
	}
}

// TestHugeDelaysDoNotWrapAround is the regression test of deadlines computed as now plus a
// duration without a bound: a Nack delay or a visibility timeout reaching past the year 2262
// wrapped around to a time long past, so the message was due again at once (handed to a second
// consumer while the first still held it) instead of never in practice.
func TestHugeDelaysDoNotWrapAround(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, t.TempDir())
		huge := time.Duration(1<<63 - 1)
		if _, err := q.Put(ctx, Message{Topic: "vis"}); err != nil {
			t.Fatal(err)
		}
		held := receiveOne(t, q, "vis", time.Second, huge)
		if _, err := q.Put(ctx, Message{Topic: "nack"}); err != nil {
			t.Fatal(err)
		}
		d := receiveOne(t, q, "nack", time.Second, time.Minute)
		if err := q.Nack(ctx, d.Receipt, huge); err != nil {
			t.Fatal(err)
		}
		for _, topic := range []string{"vis", "nack"} {
			wctx, cancel := context.WithTimeout(ctx, time.Hour)
			ds, err := q.Receive(wctx, topic, 1, time.Minute)
			cancel()
			if len(ds) != 0 || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("%s: delivered again within an hour: %+v, %v", topic, ds, err)
			}
		}
		if err := q.Ack(ctx, held.Receipt); err != nil {
			t.Fatalf("ack of the long lease: %v", err)
		}
		check(t, q)
	})
}

// TestReceiveOnManyTopicsKeepsNoMemory is the regression test for Receive calls on ever new topic
// names (which any HTTP client can make) each leaving an entry in memory for good.
func TestReceiveOnManyTopicsKeepsNoMemory(t *testing.T) {
	base := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		q := open(t, base)
		ctx := context.Background()
		for i := range 1000 {
			rctx, cancel := context.WithTimeout(ctx, time.Millisecond)
			if _, err := q.Receive(rctx, fmt.Sprintf("topic-%d", i), 1, time.Second); !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Receive on an empty topic: %v", err)
			}
			cancel()
		}
		// A waiting Receive keeps its topic, and is woken when a message arrives.
		got := make(chan []Delivery)
		go func() {
			ds, err := q.Receive(ctx, "live", 1, time.Second)
			if err != nil {
				t.Error(err)
			}
			got <- ds
		}()
		synctest.Wait()
		if _, err := q.Put(ctx, Message{Topic: "live", Payload: []byte("x"), DeliverAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		ds := <-got
		if len(ds) != 1 {
			t.Fatalf("the waiting Receive got %d messages", len(ds))
		}
		if err := q.Ack(ctx, ds[0].Receipt); err != nil {
			t.Fatal(err)
		}
		q.mu.Lock()
		n := len(q.mem.topics)
		q.mu.Unlock()
		if n != 0 {
			t.Fatalf("%d topics remembered after every Receive returned and every message is done", n)
		}
		check(t, q)
	})
}

// TestReadyInDueOrderWhenTimersFireOutOfOrder makes the timers of five buckets a millisecond apart
// fire latest first, as the shards of a loaded wheel may: Receive still delivers earliest due
// first (the conformance case OrderByDueTime failed over HTTP on a loaded machine), and paging
// through the due messages gives the same order, each once.
func TestReadyInDueOrderWhenTimersFireOutOfOrder(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, dir)
		start := time.Now().Add(time.Second)
		// The loader moves each slot of the disk wheel into memory a preload ahead of it, from
		// its own goroutine, which Open starts: a Put made before it took start's slot goes to
		// the disk wheel, where no bucket holds it (one run in about a hundred under load).
		synctest.Wait()
		q.mu.Lock()
		loaded, last := q.disk.loaded, q.disk.slotOf(start.Add(4*time.Millisecond).UnixNano())
		q.mu.Unlock()
		if loaded < last {
			t.Fatalf("the loader is at slot %d after it settled; the messages are due in slot %d: they would not be in memory", loaded, last)
		}
		var want []string
		for i := range 5 {
			id, err := q.Put(ctx, Message{Topic: "t", DeliverAt: start.Add(time.Duration(i) * time.Millisecond)})
			if err != nil {
				t.Fatal(err)
			}
			want = append(want, id)
		}
		// Fire the buckets' timers, latest first, a little early (the test's stand-in for a wheel
		// whose shards ran apart); Receive is called once all are due.
		q.mu.Lock()
		keys := slices.Sorted(maps.Keys(q.mem.buckets))
		for _, k := range slices.Backward(keys) {
			q.mem.take(q.mem.buckets[k], q.mem.makeReady)
		}
		q.mu.Unlock()
		if len(keys) != 5 {
			t.Fatalf("%d buckets; want one per message", len(keys))
		}
		if err := q.checkState(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Until(start) + 5*time.Millisecond)

		var paged []string
		cursor := ""
		for {
			page, next, err := q.Messages(ctx, "t", queue.Due, cursor, 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range page {
				paged = append(paged, m.ID)
			}
			if cursor = next; cursor == "" {
				break
			}
		}
		if !slices.Equal(paged, want) {
			t.Errorf("due messages paged %v; want %v, earliest due first", paged, want)
		}
		ds, err := q.Receive(ctx, "t", 5, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, d := range ds {
			got = append(got, d.ID)
		}
		if !slices.Equal(got, want) {
			t.Errorf("delivered %v; want %v, earliest due first", got, want)
		}
	})
}

// TestListDueAtLoadKeepsDueOrder puts more messages than makeReady looks back over (readyReorder)
// into one list of the disk wheel, in due order, and opens the queue again after they are all
// due: the list is loaded past due, and its messages must come in due order, those due at one
// moment in the order of their Puts. Made ready newest first, each went to the head of the ready
// list until it was out of makeReady's reach, and then to the tail.
func TestListDueAtLoadKeepsDueOrder(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, dir, WithSlot(time.Second))
		base := time.Now().Add(time.Hour) // the start of a slot: the bubble starts on a whole second
		var ms []Message
		for i := range 3 * readyReorder {
			at := base.Add(time.Duration(i) * time.Millisecond)
			ms = append(ms, Message{ID: fmt.Sprintf("m-%03d", i), Topic: "t", DeliverAt: at})
		}
		for i := range 10 { // due at one moment, after the others
			ms = append(ms, Message{ID: fmt.Sprintf("same-%d", i), Topic: "t", DeliverAt: base.Add(500 * time.Millisecond)})
		}
		for _, m := range ms {
			if _, err := q.Put(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Hour)
		q = open(t, dir, WithSlot(time.Second))
		defer q.Close()
		var got []string
		for len(got) < len(ms) {
			ds, err := q.Receive(ctx, "t", len(ms), time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			for _, d := range ds {
				got = append(got, d.ID)
			}
		}
		for i, m := range ms {
			if got[i] != m.ID {
				t.Fatalf("delivery %d is %s, want %s (due order, then the order of the Puts): %v", i, got[i], m.ID, got)
			}
		}
	})
}

// TestLargeSlotLoadsEarly puts enough messages in one slot for loadLead to move its load 100 ms
// ahead of the preload, and checks the loader has loaded it by then, while a slot of one message
// beside it is still loaded only at its preload; the messages still come at their times.
func TestLargeSlotLoadsEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, t.TempDir(), WithSlot(time.Second), WithHorizon(10*time.Second), WithPreload(time.Second), WithNoSync())
		big := time.Now().Truncate(time.Second).Add(4 * time.Second)
		const n = 5000 // loadLead: 100 ms
		ms := make([]Message, n)
		for i := range ms {
			ms[i] = Message{Topic: "t", DeliverAt: big.Add(time.Duration(i) * time.Millisecond / 10)}
		}
		if _, err := q.PutBatch(ctx, ms); err != nil {
			t.Fatal(err)
		}
		if _, err := q.Put(ctx, Message{Topic: "t", DeliverAt: big.Add(time.Second)}); err != nil {
			t.Fatal(err)
		}
		slot := func(at time.Time) int64 {
			q.mu.Lock()
			defer q.mu.Unlock()
			return q.disk.slotOf(at.UnixNano())
		}
		loaded := func() int64 {
			synctest.Wait()
			q.mu.Lock()
			defer q.mu.Unlock()
			return q.disk.loaded
		}
		if lead := loadLead(n); lead != 100*time.Millisecond {
			t.Fatalf("loadLead(%d) = %v; want 100ms", n, lead)
		}
		time.Sleep(time.Until(big.Add(-time.Second - 150*time.Millisecond)))
		if got := loaded(); got >= slot(big) {
			t.Fatalf("slot %d loaded 150 ms before its preload and lead; want later", got)
		}
		time.Sleep(100 * time.Millisecond) // 50 ms before the preload, 50 ms into the lead
		if got := loaded(); got != slot(big) {
			t.Fatalf("the loader is at slot %d 50 ms before the preload of slot %d, which holds %d messages; want it loaded", got, slot(big), n)
		}
		time.Sleep(time.Until(big.Add(-60 * time.Millisecond))) // the next slot, of one message: at its preload, not before
		if got := loaded(); got != slot(big) {
			t.Fatalf("the loader is at slot %d 940 ms before the preload of slot %d, which holds one message; want %d", got, slot(big)+1, slot(big))
		}
		for range n + 1 {
			d := receiveOne(t, q, "t", time.Hour, time.Hour)
			if late := time.Since(d.DeliverAt); late < 0 || late > time.Millisecond {
				t.Fatalf("message due %v delivered %v late", d.DeliverAt.Sub(big), late)
			}
			if err := q.Ack(ctx, d.Receipt); err != nil {
				t.Fatal(err)
			}
		}
		check(t, q)
	})
}
