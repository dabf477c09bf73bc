package delayq

import (
	"context"
	"errors"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/queue"
)

// TestSyncStats checks that durable puts are counted as syncs, each in a bucket that bounds its
// time, and that puts with NoSync leave the counts flat.
func TestSyncStats(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		opts    []Option
		durable bool
	}{
		{"durable", nil, true},
		{"NoSync", []Option{WithNoSync()}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q := open(t, t.TempDir(), append(tc.opts, WithLogger(quiet))...)
			before := q.Snapshot().Syncs
			const puts = 20
			for range puts {
				if _, err := q.Put(ctx, Message{Topic: "t", DeliverAt: time.Now().Add(time.Hour)}); err != nil {
					t.Fatal(err)
				}
			}
			st := q.Snapshot().Syncs
			n := st.Count - before.Count
			switch {
			case tc.durable && n < puts:
				// Each Put waits for a sync that began after its record was appended.
				t.Errorf("%d syncs for %d puts one after another, want at least %d", n, puts, puts)
			case tc.durable && st.Total <= before.Total:
				t.Errorf("sync time went from %v to %v", before.Total, st.Total)
			case !tc.durable && (n != 0 || st.Total != before.Total):
				t.Errorf("NoSync: %d syncs taking %v counted, want none", n, st.Total-before.Total)
			}
			if len(st.Buckets) == 0 {
				t.Fatal("no buckets")
			}
			prev := SyncBucket{}
			for _, b := range st.Buckets {
				if b.UpperBound <= prev.UpperBound || b.Count < prev.Count || b.Count > st.Count {
					t.Fatalf("buckets not cumulative with rising bounds: %+v after %+v (count %d)", b, prev, st.Count)
				}
				prev = b
			}
			if st.Buckets[0].UpperBound != 50*time.Microsecond || prev.UpperBound < 3*time.Second {
				t.Errorf("buckets span %v to %v, want 50µs to over 3s", st.Buckets[0].UpperBound, prev.UpperBound)
			}
			// Syncs do not take hours: all but the odd stall on a loaded machine are in a bucket.
			if tc.durable && prev.Count == 0 {
				t.Errorf("no sync in any bucket of %+v", st.Buckets)
			}
		})
	}
}

// TestLatenessCountsEveryMessage is the regression test of a lateness summary without a count or
// a sum (a Prometheus summary exported from it had _count and _sum 0): Stats counts every message
// that came due since Open, beyond the 4096 its quantiles cover, and sums their lateness.
func TestLatenessCountsEveryMessage(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, t.TempDir(), WithNoSync())
		const n = 5000
		var ms []Message
		for i := range n {
			ms = append(ms, Message{Topic: "t", DeliverAt: time.Now().Add(time.Second + time.Duration(i%7)*time.Millisecond)})
		}
		if _, err := q.PutBatch(ctx, ms); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		st, err := q.Stats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// In a bubble the wheel fires at the end of each due millisecond: no message is late by
		// more than one.
		if st.Lateness.Count != n || st.Lateness.Sum < 0 || st.Lateness.Sum > n*time.Millisecond || st.Due != n {
			t.Fatalf("Stats = %+v; want %d messages due with a lateness count of %d and a sum of at most %v", st, n, n, n*time.Millisecond)
		}
	})
}

// TestStatsReadyAndMetrics checks the queue as a queue.Engine and queue.Reporter: Stats and Ready
// of an open queue, the metrics it reports, and Stats and Ready after Close.
func TestStatsReadyAndMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		testStatsReadyAndMetrics(t)
	})
}

func testStatsReadyAndMetrics(t *testing.T) {
	ctx := context.Background()
	q := open(t, t.TempDir(), WithNoSync())
	q.Put(ctx, Message{Topic: "t", DeliverAt: time.Now().Add(time.Hour)})
	q.Put(ctx, Message{Topic: "t"})
	time.Sleep(10 * time.Millisecond)
	if err := q.Ready(ctx); err != nil {
		t.Fatalf("Ready of an open queue: %v", err)
	}
	if st, err := q.Stats(ctx); err != nil || st.Scheduled != 1 || st.Due != 1 {
		t.Fatalf("Stats = %+v, %v; want 1 scheduled and 1 due", st, err)
	}
	ms, err := q.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]queue.Metric{}
	for _, m := range ms {
		names[m.Name] = m
	}
	for _, want := range []string{"fsync_duration_seconds", "corrupt_records_total", "log_segments", "log_bytes",
		"engine_puts_total", "engine_deliveries_total", "engine_acks_total", "engine_nacks_total", "engine_cancels_total",
		"lease_expiries_total", "dead_letters_total", "engine_purged_total", "engine_requeued_total", "engine_delivered_now_total"} {
		if _, ok := names[want]; !ok {
			t.Errorf("Metrics lacks %s", want)
		}
	}
	if m := names["engine_puts_total"]; m.Kind != queue.Counter || m.Value != 2 {
		t.Errorf("engine_puts_total = %+v; want a counter of 2", m)
	}
	if m := names["fsync_duration_seconds"]; m.Kind != queue.Histogram || len(m.Buckets) == 0 {
		t.Errorf("fsync_duration_seconds = %+v; want a histogram", m)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	if err := q.Ready(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Ready after Close: %v; want ErrClosed", err)
	}
	if _, err := q.Stats(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Stats after Close: %v; want ErrClosed", err)
	}
}

// TestFailureMakesTheQueueUnavailable checks that a failure that stops the queue (here, the owner
// of a wheel given with WithWheel stopping it) is reported by Ready and by later calls as
// ErrUnavailable, with its cause.
func TestFailureMakesTheQueueUnavailable(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		w := tock.New()
		q := open(t, t.TempDir(), WithNoSync(), WithWheel(w))
		time.Sleep(time.Second) // the near slots are loaded: a message due soon goes on the wheel
		w.Stop()
		if _, err := q.Put(ctx, Message{Topic: "t", DeliverAt: time.Now().Add(100 * time.Millisecond)}); err != nil {
			t.Fatalf("the Put that finds the wheel stopped: %v", err)
		}
		err := q.Ready(ctx)
		if !errors.Is(err, ErrUnavailable) || !errors.Is(err, tock.ErrStopped) {
			t.Fatalf("Ready after the wheel stopped: %v; want ErrUnavailable and tock.ErrStopped", err)
		}
		if _, err := q.Put(ctx, Message{Topic: "t"}); !errors.Is(err, ErrUnavailable) {
			t.Fatalf("Put after a failure: %v; want ErrUnavailable", err)
		}
	})
}

// TestDueOnDiskIsNotPending reopens a queue after its messages' due time passed while it was
// closed, with the loader held before it loads their slot: they are due, not pending, in
// Snapshot, Stats and Topics, and Receive gets them once the loader goes on. Before, they counted
// as pending until the loader had moved them: after kill -9 with 1,000,000 daily schedules, an
// Open that ended after the fires' time (09:00 in Paris) found 1,015,360 pending: today's
// 1,000,000 fires still on disk, and the 15,360 fires of the next day planned so far.
func TestDueOnDiskIsNotPending(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		opts := []Option{WithSlot(time.Second), WithHorizon(10 * time.Second), WithPreload(time.Second)}
		q, err := Open(dir, opts...)
		if err != nil {
			t.Fatal(err)
		}
		const n = 10
		at := time.Now().Add(5 * time.Second)
		for range n {
			if _, err := q.Put(ctx, Message{Topic: "t", DeliverAt: at}); err != nil {
				t.Fatal(err)
			}
		}
		if s := q.Snapshot(); s.Pending != n || s.Due != 0 {
			t.Fatalf("before their time: pending %d, due %d; want %d and 0", s.Pending, s.Due, n)
		}
		q.Close()
		time.Sleep(10 * time.Second)

		held, let := make(chan struct{}), make(chan struct{})
		var once sync.Once
		hold := func(c *config) {
			c.beforeLoad = func() {
				once.Do(func() {
					close(held)
					<-let
				})
			}
		}
		q = open(t, dir, append(opts, hold)...)
		letGo := sync.OnceFunc(func() { close(let) })
		defer letGo()
		<-held
		if s := q.Snapshot(); s.Pending != 0 || s.Due != n {
			t.Errorf("due on disk, not loaded: Snapshot pending %d, due %d; want 0 and %d", s.Pending, s.Due, n)
		}
		if st, err := q.Stats(ctx); err != nil || st.Scheduled != 0 || st.Due != n {
			t.Errorf("due on disk, not loaded: Stats %+v, %v; want 0 scheduled and %d due", st, err, n)
		}
		if ts, err := q.Topics(ctx); err != nil || len(ts) != 1 || ts[0].Scheduled != 0 || ts[0].Due != n {
			t.Errorf("due on disk, not loaded: Topics %+v, %v; want t with 0 scheduled and %d due", ts, err, n)
		}
		letGo()
		for got := 0; got < n; {
			ds, err := q.Receive(ctx, "t", n, time.Minute)
			if err != nil {
				t.Fatalf("Receive after %d of %d: %v", got, n, err)
			}
			got += len(ds)
		}
	})
}
