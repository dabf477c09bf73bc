package worker_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/worker"
)

// The Worker's behaviour on the embedded engine, in synctest bubbles: the engine's time and the
// Worker's are the bubble's, so a handler that runs for minutes runs in milliseconds and the
// leases' deadlines are exact.

var quiet = slog.New(slog.DiscardHandler)

// openQueue opens a delayq queue in the bubble, closed when the test ends.
func openQueue(t *testing.T, opts ...delayq.Option) *delayq.Queue {
	t.Helper()
	q, err := delayq.Open(t.TempDir(), append([]delayq.Option{delayq.WithNoSync()}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

// putN puts n messages on topic, due now, and returns their IDs.
func putN(t *testing.T, e queue.Engine, topic string, n int) []string {
	t.Helper()
	ids := make([]string, n)
	for i := range ids {
		id, err := e.Put(context.Background(), queue.Message{Topic: topic, Payload: fmt.Appendf(nil, "m%d", i)})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = id
	}
	return ids
}

// running runs w until the returned stop is called, which returns Run's error.
func running(w *worker.Worker) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	return func() error {
		cancel()
		return <-done
	}
}

// mustEmpty checks that the engine holds nothing due, scheduled or leased.
func mustEmpty(t *testing.T, e queue.Engine) {
	t.Helper()
	st, err := e.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.Scheduled+st.Due+st.Leased != 0 {
		t.Fatalf("engine holds %+v; want nothing", st)
	}
}

func TestHandlesEveryMessageOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQueue(t)
		reg := prometheus.NewRegistry()
		w := worker.New(q, worker.WithConcurrency(8), worker.WithRegisterer(reg), worker.WithLogger(quiet))
		var mu sync.Mutex
		seen := map[string]int{}
		w.HandleFunc("t", func(ctx context.Context, d queue.Delivery) error {
			time.Sleep(10 * time.Millisecond)
			mu.Lock()
			seen[d.ID]++
			mu.Unlock()
			return nil
		})
		ids := putN(t, q, "t", 100)
		stop := running(w)
		time.Sleep(time.Second)
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		for _, id := range ids {
			if seen[id] != 1 {
				t.Fatalf("message %s handled %d times; want once", id, seen[id])
			}
		}
		mustEmpty(t, q)
		if n := metric(t, reg, "tock_worker_handled_total", "acked", "t"); n != 100 {
			t.Fatalf("tock_worker_handled_total{outcome=acked} = %v; want 100", n)
		}
	})
}

// metric returns the value of the counter or gauge name with the given label values, in the
// order of their names (Prometheus sorts labels), gathered from reg; 0 when it has none.
func metric(t *testing.T, reg *prometheus.Registry, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.Metric {
			ok := len(m.Label) == len(labels)
			for i, l := range m.Label {
				ok = ok && l.GetValue() == labels[i]
			}
			if ok {
				return m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return 0
}

// TestConcurrencyBound checks that no more handlers run at once than the bound, and that the bound
// is reached.
func TestConcurrencyBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQueue(t)
		w := worker.New(q, worker.WithConcurrency(4), worker.WithLogger(quiet))
		var now, peak atomic.Int64
		w.HandleFunc("t", func(ctx context.Context, d queue.Delivery) error {
			n := now.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(100 * time.Millisecond)
			now.Add(-1)
			return nil
		})
		putN(t, q, "t", 40)
		stop := running(w)
		time.Sleep(2 * time.Second)
		stop()
		if p := peak.Load(); p != 4 {
			t.Fatalf("%d handlers ran at once at most; want the bound, 4", p)
		}
		mustEmpty(t, q)
	})
}

// TestLongHandlerKeepsItsLease runs a handler for three times the visibility: its lease is
// extended, so the message is delivered once, and acked.
func TestLongHandlerKeepsItsLease(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQueue(t)
		const vis = 30 * time.Second
		w := worker.New(q, worker.WithVisibility(vis), worker.WithConcurrency(2), worker.WithLogger(quiet))
		var calls atomic.Int64
		w.HandleFunc("t", func(ctx context.Context, d queue.Delivery) error {
			calls.Add(1)
			select {
			case <-time.After(3 * vis):
				return nil
			case <-ctx.Done():
				return context.Cause(ctx)
			}
		})
		putN(t, q, "t", 1)
		stop := running(w)
		time.Sleep(4 * vis)
		stop()
		if n := calls.Load(); n != 1 {
			t.Fatalf("a handler of 3x the visibility was called %d times; want once", n)
		}
		if snap := q.Snapshot(); snap.Expired != 0 || snap.Acked != 1 || snap.Extended < 8 {
			t.Fatalf("leases expired %d, acked %d, extended %d; want 0, 1 and at least 8 (every third of the visibility)",
				snap.Expired, snap.Acked, snap.Extended)
		}
	})
}

// TestFailuresSayWhy checks the three ways a handler fails: an error is retried after the
// backoff with its text as the reason; a Permanent error sends the message to the dead letters at
// once; a panic is recovered and retried.
func TestFailuresSayWhy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQueue(t, delayq.WithMaxAttempts(10))
		reg := prometheus.NewRegistry()
		w := worker.New(q, worker.WithLogger(quiet), worker.WithRegisterer(reg),
			worker.WithBackoff(func(attempt int) time.Duration { return time.Duration(attempt) * time.Minute }))
		w.HandleFunc("t", func(ctx context.Context, d queue.Delivery) error {
			switch string(d.Payload) {
			case "flaky":
				if d.Attempt == 1 {
					return errors.New("smtp: 451 try later")
				}
				return nil
			case "poison":
				return worker.Permanent(errors.New("no such mailbox"))
			case "panics":
				if d.Attempt == 1 {
					panic("nil map")
				}
				return nil
			}
			return fmt.Errorf("unexpected payload %q", d.Payload)
		})
		ctx := context.Background()
		flaky, _ := q.Put(ctx, queue.Message{Topic: "t", Payload: []byte("flaky")})
		poison, _ := q.Put(ctx, queue.Message{Topic: "t", Payload: []byte("poison")})
		panics, _ := q.Put(ctx, queue.Message{Topic: "t", Payload: []byte("panics")})
		stop := running(w)
		time.Sleep(time.Second)
		for _, c := range []struct{ id, failure, reason string }{
			{flaky, "nacked", "smtp: 451 try later"},
			{poison, "dead-lettered", "permanent: no such mailbox"},
			{panics, "nacked", "panic: nil map"},
		} {
			m, err := q.Message(ctx, c.id)
			if err != nil || m.LastFailure != c.failure || m.Reason != c.reason {
				t.Fatalf("message %s: %q %q (%v); want %q %q", c.id, m.LastFailure, m.Reason, err, c.failure, c.reason)
			}
		}
		if m, _ := q.Message(ctx, flaky); m.State != queue.Scheduled || m.DeliverAt.Sub(time.Now()) > time.Minute {
			t.Fatalf("after its first failure, the flaky message is %s due in %v; want scheduled within the backoff of 1m",
				m.State, m.DeliverAt.Sub(time.Now()))
		}
		time.Sleep(2 * time.Minute)
		stop()
		if _, err := q.Message(ctx, flaky); !errors.Is(err, queue.ErrNotFound) {
			t.Fatalf("the flaky message after its retry: %v; want it acked", err)
		}
		if _, err := q.Message(ctx, panics); !errors.Is(err, queue.ErrNotFound) {
			t.Fatalf("the message whose handler panicked, after its retry: %v; want it acked", err)
		}
		for _, c := range []struct{ kind string }{{"error"}, {"permanent"}, {"panic"}} {
			if n := metric(t, reg, "tock_worker_failures_total", c.kind, "t"); n != 1 {
				t.Errorf("tock_worker_failures_total{kind=%q} = %v; want 1", c.kind, n)
			}
		}
	})
}

// TestShutdownWaitsThenHandsBack cancels Run while two handlers run: the quick one finishes and is
// acked; the slow one's context ends with ErrShutdown at the timeout and its message is due again
// at once.
func TestShutdownWaitsThenHandsBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQueue(t)
		w := worker.New(q, worker.WithShutdownTimeout(5*time.Second), worker.WithLogger(quiet))
		cause := make(chan error, 1)
		w.HandleFunc("t", func(ctx context.Context, d queue.Delivery) error {
			if string(d.Payload) == "m0" {
				time.Sleep(2 * time.Second)
				return nil
			}
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return ctx.Err()
		})
		ids := putN(t, q, "t", 2)
		stop := running(w)
		time.Sleep(100 * time.Millisecond)
		began := time.Now()
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		if took := time.Since(began); took != 5*time.Second {
			t.Fatalf("Run returned %v after its context ended; want the shutdown timeout, 5s", took)
		}
		if c := <-cause; !errors.Is(c, worker.ErrShutdown) {
			t.Fatalf("the slow handler's context ended with %v; want ErrShutdown", c)
		}
		if _, err := q.Message(context.Background(), ids[0]); !errors.Is(err, queue.ErrNotFound) {
			t.Fatalf("the quick message: %v; want it acked during the shutdown", err)
		}
		m, err := q.Message(context.Background(), ids[1])
		if err != nil || m.State != queue.Due || m.Reason == "" {
			t.Fatalf("the slow message: %+v, %v; want it due again at once, with a reason", m, err)
		}
	})
}

// TestLeaseLostCancelsHandler cancels a message while its handler runs: the next extension is
// refused, and the handler's context ends with ErrLeaseLost.
func TestLeaseLostCancelsHandler(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQueue(t)
		w := worker.New(q, worker.WithVisibility(30*time.Second), worker.WithLogger(quiet))
		started, cause := make(chan string, 1), make(chan error, 1)
		w.HandleFunc("t", func(ctx context.Context, d queue.Delivery) error {
			started <- d.ID
			<-ctx.Done()
			cause <- context.Cause(ctx)
			return ctx.Err()
		})
		putN(t, q, "t", 1)
		stop := running(w)
		defer stop()
		id := <-started
		if ok, err := q.Cancel(context.Background(), id); !ok || err != nil {
			t.Fatalf("Cancel of the leased message: %v, %v", ok, err)
		}
		select {
		case c := <-cause:
			if !errors.Is(c, worker.ErrLeaseLost) {
				t.Fatalf("the handler's context ended with %v; want ErrLeaseLost", c)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("the handler of a cancelled message still runs after its lease would have ended")
		}
	})
}

// TestEngineClosed closes the engine under a running Worker: Run returns an error matching
// queue.ErrClosed.
func TestEngineClosed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := openQueue(t)
		w := worker.New(q, worker.WithLogger(quiet))
		w.HandleFunc("t", func(ctx context.Context, d queue.Delivery) error { return nil })
		done := make(chan error, 1)
		go func() { done <- w.Run(context.Background()) }()
		time.Sleep(time.Second)
		q.Close()
		if err := <-done; !errors.Is(err, queue.ErrClosed) {
			t.Fatalf("Run after the engine closed: %v; want ErrClosed", err)
		}
	})
}

// TestOptionsAndMisuse checks that bad options and misuse are refused as the conventions say.
func TestOptionsAndMisuse(t *testing.T) {
	q, err := delayq.Open(t.TempDir(), delayq.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	for _, c := range []struct {
		name string
		opt  worker.Option
	}{
		{"concurrency 0", worker.WithConcurrency(0)},
		{"visibility below the minimum", worker.WithVisibility(worker.MinVisibility - 1)},
		{"negative shutdown", worker.WithShutdownTimeout(-1)},
		{"max receive 0", worker.WithMaxReceive(0)},
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("New with %s did not panic", c.name)
				}
			}()
			worker.New(q, c.opt)
		}()
	}
	w := worker.New(q, nil, worker.WithBackoff(nil), worker.WithLogger(nil), worker.WithRegisterer(nil))
	if err := w.Run(context.Background()); err == nil {
		t.Fatal("Run with no handler returned nil")
	}
	w.HandleFunc("t", func(ctx context.Context, d queue.Delivery) error { return nil })
	defer func() {
		if recover() == nil {
			t.Fatal("a second handler for one topic did not panic")
		}
	}()
	w.HandleFunc("t", func(ctx context.Context, d queue.Delivery) error { return nil })
}
