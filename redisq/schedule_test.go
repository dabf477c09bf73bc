package redisq

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/tockwheel/tock/queue"
)

// TestScheduleFireHome checks that a fire's ID lives in the home shard of its schedule's name,
// whatever the time, so that one script decides and puts it.
func TestScheduleFireHome(t *testing.T) {
	l := newLayout("p", 16)
	for _, name := range []string{"a", "digest", "x.y:z", "n-1"} {
		for _, at := range []time.Time{time.Unix(0, 0), time.Unix(1772953200, 250e6), queue.MaxDeliverAt()} {
			for _, ms := range []bool{false, true} {
				if id := queue.FireID(name, at, ms); l.home(id) != l.home(name) {
					t.Fatalf("home(%q) = %d; home(%q) = %d", id, l.home(id), name, l.home(name))
				}
			}
		}
	}
}

// TestScheduleThreeProcesses runs 40 schedules every 100 ms for 3 s on three processes of one
// deployment, one of which closes halfway, while a fourth consumes: every nominal time from the
// first to the last of each schedule is delivered, once, and the layout holds.
func TestScheduleThreeProcesses(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	prefix := newPrefix()
	var qs []*Queue
	for range 3 {
		qs = append(qs, openQueue(t, rdb, WithPrefix(prefix)))
	}
	consumer := openQueue(t, rdb, WithPrefix(prefix))
	ctx := testCtx(t, 60*time.Second)
	const n, period = 40, 100 * time.Millisecond
	for i := range n {
		sc := queue.Schedule{Name: fmt.Sprintf("s%d", i), Topic: "t", Spec: "@every 100ms", Misfire: queue.MisfireAll}
		if _, err := qs[i%3].SetSchedule(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	times := map[string][]time.Time{}
	receive := func(wait time.Duration) int {
		rctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		ds, err := consumer.Receive(rctx, "t", 500, time.Minute)
		if err != nil && rctx.Err() == nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if seen[d.ID] {
				t.Fatalf("fire %q delivered twice", d.ID)
			}
			seen[d.ID] = true
			name, at, ok := queue.ParseFireID(d.ID)
			if !ok {
				t.Fatalf("delivered %q, not a fire", d.ID)
			}
			times[name] = append(times[name], at)
			if err := consumer.Ack(ctx, d.Receipt); err != nil {
				t.Fatal(err)
			}
		}
		return len(ds)
	}
	start := time.Now()
	closed := false
	for time.Since(start) < 3*time.Second {
		if !closed && time.Since(start) > 1500*time.Millisecond {
			qs[0].Close()
			closed = true
		}
		receive(200 * time.Millisecond)
	}
	for i := range n {
		if err := qs[1].PauseSchedule(ctx, fmt.Sprintf("s%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	for receive(500*time.Millisecond) > 0 {
	}
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		ts := times[name]
		if len(ts) < 3 {
			t.Fatalf("schedule %s fired %d times in 3 s: too few to tell a gap", name, len(ts))
		}
		first, last := ts[0], ts[0]
		for _, at := range ts {
			if at.Before(first) {
				first = at
			}
			if at.After(last) {
				last = at
			}
		}
		if want := int(last.Sub(first)/period) + 1; want != len(ts) {
			t.Fatalf("schedule %s: %d fires from %v to %v; want %d, one per period", name, len(ts), first, last, want)
		}
	}
	mustCheck(t, ctx, rdb, qs[1], "three processes fired schedules")
	st, err := qs[2].ScheduleStats(ctx)
	if err != nil || st.Schedules != n || st.Paused != n || st.Fires != uint64(len(seen)) {
		t.Fatalf("ScheduleStats = %+v, %v; want %d schedules, all paused, %d fires", st, err, n, len(seen))
	}
}
