package delayq

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock"
)

// TestBadOptionsAreNamed checks that Open reports every option out of its range, naming it, and
// that a nil Option and WithLogger(nil) are ignored.
func TestBadOptionsAreNamed(t *testing.T) {
	for _, c := range []struct {
		opt  Option
		name string
	}{
		{WithSlot(500 * time.Microsecond), "WithSlot(500µs): below 1ms"},
		{WithHorizon(time.Millisecond), "WithHorizon(1ms)"},
		{WithHorizon(1 << 62), "WithHorizon("},
		{WithPreload(-time.Second), "WithPreload(-1s)"},
		{WithBackoff(0, time.Second), "WithBackoff(0s, 1s)"},
		{WithBackoff(time.Minute, time.Second), "WithBackoff(1m0s, 1s)"},
		{WithCheckpointInterval(0), "WithCheckpointInterval(0s)"},
		{WithSegmentSize(100), "WithSegmentSize(100)"},
		{WithSegmentSize(4 << 30), "WithSegmentSize(4294967296)"},
		{WithMaxPayload(-1), "WithMaxPayload(-1)"},
		{WithMaxPayload(MaxPayloadLimit + 1), "WithMaxPayload(16777217)"},
		{WithDeadLetterTopic(strings.Repeat("d", 1<<16)), "WithDeadLetterTopic"},
		{WithCompaction(1.5, 0), "WithCompaction(1.5, "},
	} {
		_, err := Open(t.TempDir(), c.opt)
		if !errors.Is(err, ErrInvalid) || !strings.HasPrefix(err.Error(), "delayq: "+c.name) {
			t.Errorf("Open with a bad option: %v; want an ErrInvalid naming %s", err, c.name)
		}
	}
	q, err := Open(t.TempDir(), nil, WithLogger(nil), WithWheel(nil))
	if err != nil {
		t.Fatalf("Open with nil options: %v", err)
	}
	q.Close()
}

// TestStoredSlotAndHorizonWin is the regression test of a slot or horizon given to Open that
// differs from the one the queue was created with: it was replaced silently, with a note at Info.
// Open refuses it now, naming both; without the options the stored ones are used.
func TestStoredSlotAndHorizonWin(t *testing.T) {
	dir := t.TempDir()
	q := open(t, dir, WithSlot(100*time.Millisecond), WithHorizon(10*time.Second))
	q.Close()
	for _, c := range []struct {
		opts []Option
		want []string // in the error; none: Open succeeds
	}{
		{nil, nil},
		{[]Option{WithSlot(100 * time.Millisecond), WithHorizon(10 * time.Second)}, nil},
		{[]Option{WithSlot(time.Second)}, []string{"WithSlot(1s)", "slot of 100ms"}},
		{[]Option{WithHorizon(20 * time.Second)}, []string{"WithHorizon(20s)", "horizon of 10s"}},
	} {
		q, err := Open(dir, c.opts...)
		if c.want == nil {
			if err != nil {
				t.Fatalf("Open(%d options): %v", len(c.opts), err)
			}
			if q.cfg.slot != 100*time.Millisecond || q.disk.horizon() != 100 {
				t.Fatalf("slot %v, %d slots; want the stored 100ms and 100", q.cfg.slot, q.disk.horizon())
			}
			q.Close()
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("Open with %v: %v, want ErrInvalid", c.want, err)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Fatalf("Open: %q does not name %q", err, w)
			}
		}
	}
}

// TestSharedWheel runs a queue on a wheel it is given: Close does not stop it (nor leave timers
// on it), and a wheel stopped by its owner makes the queue's calls fail with tock.ErrStopped.
func TestSharedWheel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		w := tock.New()
		defer w.Stop()
		q := open(t, t.TempDir(), WithWheel(w))
		q.Put(ctx, Message{Topic: "t", DeliverAt: time.Now().Add(100 * time.Millisecond)})
		q.Put(ctx, Message{Topic: "t", DeliverAt: time.Now().Add(time.Hour)})
		if d := receiveOne(t, q, "t", time.Second, time.Minute); d.Attempt != 1 {
			t.Fatalf("delivery %+v", d)
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		if n := w.Pending(); n != 0 {
			t.Fatalf("%d timers left on the shared wheel after Close", n)
		}
		if _, err := w.AfterFunc(time.Millisecond, func() {}); err != nil {
			t.Fatalf("the shared wheel after Close: %v", err)
		}

		stopped := tock.New()
		q = open(t, t.TempDir(), WithWheel(stopped))
		stopped.Stop()
		q.Put(ctx, Message{Topic: "t", DeliverAt: time.Now().Add(10 * time.Millisecond)})
		// The queue meets the stopped wheel when it sets a timer for that message: in Put if its
		// slot is loaded already, else when the loader loads it, a preload ahead of its due time.
		time.Sleep(time.Second)
		if _, err := q.Put(ctx, Message{Topic: "t"}); !errors.Is(err, tock.ErrStopped) {
			t.Fatalf("Put on a queue whose wheel was stopped: %v", err)
		}
	})
}

// TestNoLockHeldWhileTheWriterLags is the regression test of the log's backpressure wait inside
// Append, which delayq called holding its lock: with the writer behind by more than the bound,
// the wait (which can last through a sync) held up every call, those that write nothing too. Now
// producers wait before taking the lock. (Real time: a goroutine blocked on a mutex is not durably
// blocked for synctest.)
func TestNoLockHeldWhileTheWriterLags(t *testing.T) {
	release := make(chan struct{})
	var holding atomic.Bool
	hold := func(c *config) {
		c.beforeWrite = func() {
			if holding.Load() {
				<-release
			}
		}
	}
	q := open(t, t.TempDir(), WithNoSync(), hold)
	holding.Store(true)
	defer close(release)
	ctx := context.Background()
	payload := make([]byte, 1<<20)
	puts := make(chan error, 40)
	go func() {
		for range 40 { // 40 MiB, over the 16 MiB bound, with the writer held
			_, err := q.Put(ctx, Message{Topic: "t", Payload: payload, DeliverAt: time.Now().Add(time.Hour)})
			puts <- err
		}
	}()
	for range 16 { // the 17th waits for room
		if err := <-puts; err != nil {
			t.Fatal(err)
		}
	}
	done := make(chan Snapshot)
	go func() { done <- q.Snapshot() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Stats waited for the log's writer")
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	defer cancel()
	if _, err := q.Receive(rctx, "u", 1, time.Second); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive while the writer lags: %v", err)
	}
}
