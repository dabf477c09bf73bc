package redisq

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	// Each call is bounded, not the test: acking 1,200 fires one by one took the test past a
	// minute at load 50; a call that hangs is a bug.
	call := func() context.Context { return testCtx(t, time.Minute) }
	const n, period = 40, 100 * time.Millisecond
	for i := range n {
		sc := queue.Schedule{Name: fmt.Sprintf("s%d", i), Topic: "t", Spec: "@every 100ms", Misfire: queue.MisfireAll}
		if _, err := qs[i%3].SetSchedule(call(), sc); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	times := map[string][]time.Time{}
	receive := func(wait time.Duration) int {
		rctx, cancel := context.WithTimeout(call(), wait)
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
			if err := consumer.Ack(call(), d.Receipt); err != nil {
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
		if err := qs[1].PauseSchedule(call(), fmt.Sprintf("s%d", i)); err != nil {
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
	mustCheck(t, call(), rdb, qs[1], "three processes fired schedules")
	st, err := qs[2].ScheduleStats(call())
	if err != nil || st.Schedules != n || st.Paused != n || st.Fires != uint64(len(seen)) {
		t.Fatalf("ScheduleStats = %+v, %v; want %d schedules, all paused, %d fires", st, err, n, len(seen))
	}
}

// TestScheduleDriverAfterRedisForgets checks what a process's schedule drivers do when Redis
// forgets the deployment (FLUSHALL, which, unlike a restart, makes no subscription fail, so that
// only the driver of the schedule's shard, at its next fire, meets the shard without its stamp):
// the driver reconciles by itself, as the housekeeping does, rather than retrying the same refusal
// every half second; and once the deployment is made anew with another shard count, so that the
// process refuses to serve it, its drivers stop, with no timer left.
func TestScheduleDriverAfterRedisForgets(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	ctx := testCtx(t, time.Minute)
	prefix := newPrefix()
	var log logBuffer
	// The process reaches Redis through a gate, which the test shuts while the deployment is made
	// anew: else its driver, reconciling after the second loss as designed, could write its
	// configuration of 4 shards back before the process of 8 opens, and that Open would refuse.
	var g gate
	q := openQueue(t, g.client(t, s.Addr), WithPrefix(prefix), WithShards(4), WithLogger(log.logger()))
	firing := func() {
		t.Helper()
		if _, err := q.SetSchedule(ctx, queue.Schedule{Name: "s", Topic: "t", Spec: "@every 100ms"}); err != nil {
			t.Fatal(err)
		}
		ds := receiveN(t, ctx, q, "t", 1)
		if err := q.Ack(ctx, ds[0].Receipt); err != nil {
			t.Fatal(err)
		}
	}
	// waitFor polls cond until it holds; the test's context bounds it.
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case <-ctx.Done():
				t.Fatalf("%s: %v", what, ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	firing()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	waitFor("the schedule driver reconciles", func() bool { return metricOf(t, q, "redis_deployment_lost_total") > 0 })
	if strings.Contains(log.String(), "firing schedules failed") {
		t.Errorf("the schedule driver logged the refusal of the stamp rather than reconcile:\n%s", log.String())
	}
	firing()

	cutOff(t, ctx, s.Addr, &g)
	// A client dialled after the cut: rdb's connection was closed by it.
	fresh := singleClient(t, s.Addr)
	if err := fresh.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	openQueue(t, fresh, WithPrefix(prefix), WithShards(8))
	g.open()
	waitFor("the process refuses the deployment", func() bool { return q.staleErr() != nil })
	if err := q.Ready(ctx); !errors.Is(err, queue.ErrUnavailable) || !strings.Contains(err.Error(), "8 shards") {
		t.Errorf("Ready of the process of 4 shards: %v; want it to name the deployment of 8", err)
	}
	// Its drivers stop: no run and no timer, for good (before, the schedule's driver retried its
	// read every half second, and logged it, as long as the process lived).
	sd := q.sched[q.lay.home("s")]
	waitFor("the schedule driver stops", func() bool {
		sd.mu.Lock()
		defer sd.mu.Unlock()
		return !sd.mu.run.busy && sd.mu.run.timerAt == 0
	})
}
