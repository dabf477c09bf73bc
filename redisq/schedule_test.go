package redisq

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/internal/testwait"
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

// TestScheduleThreeProcesses runs 40 schedules every 100 ms on three processes of one
// deployment, one of which closes once each schedule has fired 10 times, while a fourth consumes:
// every schedule fires 10 times more, every nominal time from the first to the last of each
// schedule is delivered, once, and the layout holds.
//
// On a busy machine a receive's reply can be lost (go-redis gives up reading it after its read
// timeout, and may send the script again): the fires it leased come again once their visibility
// ends, as the package doc says of a repeated receive. So the consumer's leases are short, and
// the drain waits until it has every fire the schedules count, or until nothing has come for two
// visibility timeouts.
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
	const n, period, visibility = 40, 100 * time.Millisecond, 5 * time.Second
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
		ds, err := consumer.Receive(rctx, "t", 500, visibility)
		if err != nil && rctx.Err() == nil {
			t.Fatal(err)
		}
		var receipts []string
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
			receipts = append(receipts, d.Receipt)
		}
		// An ack after the lease ran out is accepted: no other receive leased them meanwhile.
		if len(receipts) > 0 {
			if err := consumer.Ack(call(), receipts...); err != nil {
				t.Fatal(err)
			}
		}
		return len(ds)
	}
	var names []string
	for i := range n {
		names = append(names, fmt.Sprintf("s%d", i))
	}
	for !firedAfter(times, names, time.Time{}, 10) {
		receive(200 * time.Millisecond)
	}
	qs[0].Close()
	closed := time.Now()
	for !firedAfter(times, names, closed, 10) {
		receive(200 * time.Millisecond)
	}
	for i := range n {
		if err := qs[1].PauseSchedule(call(), fmt.Sprintf("s%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	fired := func() uint64 {
		st, err := qs[2].ScheduleStats(call())
		if err != nil {
			t.Fatal(err)
		}
		return st.Fires
	}
	for quiet := time.Now(); uint64(len(seen)) < fired() && time.Since(quiet) < 2*visibility; {
		if receive(500*time.Millisecond) > 0 {
			quiet = time.Now()
		}
	}
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		ts := times[name]
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
	firing()
	if err := rdb.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, ctx, "the schedule driver reconciles", func() bool { return metricOf(t, q, "redis_deployment_lost_total") > 0 })
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
	testwait.Until(t, ctx, "the process refuses the deployment", func() bool { return q.staleErr() != nil })
	if err := q.Ready(ctx); !errors.Is(err, queue.ErrUnavailable) || !strings.Contains(err.Error(), "8 shards") {
		t.Errorf("Ready of the process of 4 shards: %v; want it to name the deployment of 8", err)
	}
	// Its drivers stop: no run and no timer, for good (before, the schedule's driver retried its
	// read every half second, and logged it, as long as the process lived).
	sd := q.sched[q.lay.home("s")]
	testwait.Until(t, ctx, "the schedule driver stops", func() bool {
		sd.mu.Lock()
		defer sd.mu.Unlock()
		return !sd.mu.run.busy && sd.mu.run.timerAt == 0
	})
}

// TestSchedulesWhileRedisPaused freezes Redis (SIGSTOP) for longer than MisfireGrace while three
// schedules of 100 ms, one per misfire policy, are due, on two processes that both fire them; the
// consumer waits out the freeze. After SIGCONT: no fire is delivered twice or before its nominal
// time, and none is missed beyond its policy: MisfireAll fires every nominal time, MisfireOnce at
// most one of those that only a decision more than the grace late could fire, MisfireSkip none of
// them; every nominal time not delivered is counted as a misfire.
func TestSchedulesWhileRedisPaused(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	ctx := testCtx(t, 2*time.Minute)
	prefix := newPrefix()
	q1 := openQueue(t, rdb, WithPrefix(prefix))
	q2 := openQueue(t, singleClient(t, s.Addr), WithPrefix(prefix))
	const period = 100 * time.Millisecond
	policies := []queue.Misfire{queue.MisfireAll, queue.MisfireOnce, queue.MisfireSkip}
	for i, m := range policies {
		sc := queue.Schedule{Name: string(m), Topic: "t", Spec: "@every 100ms", Misfire: m}
		if _, err := []*Queue{q1, q2}[i%2].SetSchedule(ctx, sc); err != nil {
			t.Fatal(err)
		}
	}
	times := map[string][]time.Time{} // nominal times delivered, by schedule
	seen := map[string]bool{}
	// receive receives and acks what is due within wait, through q1.
	receive := func(wait time.Duration) int {
		rctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		ds, err := q1.Receive(rctx, "t", 100, time.Minute)
		now := time.Now()
		if err != nil && rctx.Err() == nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			name, at, ok := queue.ParseFireID(d.ID)
			switch {
			case !ok:
				t.Fatalf("delivered %q, not a fire", d.ID)
			case seen[d.ID]:
				t.Fatalf("fire %q delivered twice", d.ID)
			case now.Before(at) || now.Before(d.DeliverAt):
				t.Fatalf("fire %q (due %v) delivered at %v, early", d.ID, d.DeliverAt, now)
			}
			seen[d.ID] = true
			times[name] = append(times[name], at)
			if err := q1.Ack(ctx, d.Receipt); err != nil {
				t.Fatal(err)
			}
		}
		return len(ds)
	}
	var names []string
	for _, m := range policies {
		names = append(names, string(m))
	}
	for !firedAfter(times, names, time.Time{}, 3) {
		receive(200 * time.Millisecond)
	}
	// The consumer calls nothing while Redis is frozen: what is under test is the processes'
	// firing, and a receive cut off by the freeze would hold its messages' leases for a minute.
	s.Pause()
	paused := time.Now()
	time.Sleep(3 * time.Second) // the freeze; how much longer it lasts on a busy machine does not matter
	resumed := time.Now()
	s.Resume()
	// Nominal times in (paused+2 periods, resumed-grace) were due while Redis was frozen, and were
	// not put before it (a fire is put at most a period ahead): only a decision after resumed, more
	// than the grace late, could fire them.
	lo, hi := paused.Add(2*period), resumed.Add(-queue.MisfireGrace)
	if hi.Sub(lo) < 5*period {
		t.Fatalf("the freeze left %v of nominal times to miss; the test's premise did not happen", hi.Sub(lo))
	}
	for !firedAfter(times, names, resumed, 3) {
		receive(200 * time.Millisecond)
	}
	for _, m := range policies {
		if err := q2.PauseSchedule(ctx, string(m)); err != nil {
			t.Fatal(err)
		}
	}
	// Every fire put (less those the pause removed) is delivered: wait for the count, bounded by
	// the test's context.
	for _, m := range policies {
		name := string(m)
		info, err := q1.Schedule(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		for uint64(len(times[name])) < info.Fires {
			receive(200 * time.Millisecond)
		}
		if uint64(len(times[name])) != info.Fires {
			t.Fatalf("schedule %s: %d fires delivered; its info counts %d", name, len(times[name]), info.Fires)
		}
		ts := slices.SortedFunc(slices.Values(times[name]), time.Time.Compare)
		first, last := ts[0], ts[len(ts)-1]
		nominal := int(last.Sub(first)/period) + 1
		if uint64(nominal-len(ts)) > info.Misfires {
			t.Errorf("schedule %s: %d nominal times from %v to %v, %d delivered, %d counted as misfires",
				name, nominal, first, last, len(ts), info.Misfires)
		}
		inFreeze := 0
		for _, at := range ts {
			if at.After(lo) && at.Before(hi) {
				inFreeze++
			}
		}
		switch m {
		case queue.MisfireAll:
			if nominal != len(ts) || info.Misfires != 0 {
				t.Errorf("schedule %s: %d fires from %v to %v, %d misfires; want %d, one per period, and none missed",
					name, len(ts), first, last, info.Misfires, nominal)
			}
		case queue.MisfireOnce:
			if inFreeze > 1 || info.Misfires == 0 {
				t.Errorf("schedule %s: %d fires of the %v to %v missed in the freeze, %d misfires; want at most one, and misfires",
					name, inFreeze, lo, hi, info.Misfires)
			}
		case queue.MisfireSkip:
			if inFreeze > 0 || info.Misfires == 0 {
				t.Errorf("schedule %s: %d fires of the %v to %v missed in the freeze, %d misfires; want none, and misfires",
					name, inFreeze, lo, hi, info.Misfires)
			}
		}
	}
	mustCheck(t, ctx, rdb, q1, "Redis paused while schedules were due")
}

// firedAfter reports whether each of the schedules names was delivered at least k fires of nominal
// times after since; times holds the nominal times delivered, by schedule.
func firedAfter(times map[string][]time.Time, names []string, since time.Time, k int) bool {
	for _, name := range names {
		n := 0
		for _, at := range times[name] {
			if at.After(since) {
				n++
			}
		}
		if n < k {
			return false
		}
	}
	return true
}

// TestScheduleSetWhileDriverSteps sets a schedule while the driver of its shard is in a step that
// read the shard before it (the step every driver takes at Open, held by a hook after its read):
// the act time that SetSchedule's reply and the shard's event tell of while the step runs is not
// replaced by what the step read (no schedule), so the schedule fires. Before, the step ended with
// no act time and no timer, and the schedule never fired (CI, under -race on a loaded machine:
// TestConformanceOneShard/ScheduleEveryTimeOnce waited two minutes for a fire). The
// recheck period is an hour, so that the driver's floor cannot stand in for the act time.
func TestScheduleSetWhileDriverSteps(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := testCtx(t, time.Minute)
	read, release := make(chan struct{}), make(chan struct{})
	var held, released sync.Once
	hold := func(int, int) {
		held.Do(func() {
			close(read)
			<-release
		})
	}
	q := openQueue(t, singleClient(t, s.Addr), WithShards(1), WithRecheck(time.Hour), withSchedStepHook(hold))
	let := func() { released.Do(func() { close(release) }) }
	t.Cleanup(let) // before Close, which waits for the step
	select {
	case <-read:
	case <-ctx.Done():
		t.Fatal("the driver's step at Open did not read the shard")
	}
	if _, err := q.SetSchedule(ctx, queue.Schedule{Name: "s", Topic: "t", Spec: "@every 50ms"}); err != nil {
		t.Fatal(err)
	}
	// The event of the set comes while the step is held, or after it: either way the reply told.
	let()
	ds := receiveN(t, ctx, q, "t", 2)
	if name, _, ok := queue.ParseFireID(ds[0].ID); !ok || name != "s" {
		t.Fatalf("received %q; want a fire of s", ds[0].ID)
	}
}

// TestScheduleDriverFloor makes a driver forget its shard's act time, as a lost event or timer
// would, while a schedule of 200 ms runs: the driver reads its shard again within the recheck
// period (its floor), and the fires go on. Before, a driver that knew of no act time set no timer,
// and after the fire already put ahead none came until some event woke the driver.
func TestScheduleDriverFloor(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := testCtx(t, time.Minute)
	q := openQueue(t, singleClient(t, s.Addr), WithShards(1), WithRecheck(500*time.Millisecond))
	if _, err := q.SetSchedule(ctx, queue.Schedule{Name: "s", Topic: "t", Spec: "@every 200ms"}); err != nil {
		t.Fatal(err)
	}
	sd := q.sched[0]
	// Once the driver is idle with its timer set for the act time, it forgets it; the schedule's
	// act time stays in Redis, and only this process fires it, so no event comes.
	for {
		sd.mu.Lock()
		idle := sd.mu.run.idleLocked() && sd.mu.known && sd.mu.act >= 0
		if idle {
			sd.mu.act = -1
			sd.mu.run.setTimerLocked(0)
			sd.armLocked()
		}
		at, floor := sd.mu.run.timerAt, q.clock.now()+q.cfg.recheck.Milliseconds()
		sd.mu.Unlock()
		if idle {
			if at == 0 || at > floor {
				t.Fatalf("a driver that knows no act time set its timer for %d; want one within the recheck period (by %d)", at, floor)
			}
			break
		}
		select {
		case <-ctx.Done():
			t.Fatal("the driver did not settle")
		case <-time.After(10 * time.Millisecond):
		}
	}
	receiveN(t, ctx, q, "t", 3)
}

// TestOverlapSkipSkipsWhatCameWhileTheFireWaited holds a driver's step between its read, made
// while an OverlapSkip schedule's fire is leased, and its fire script, which runs once the fire is
// acked: the nominal times that came while the fire waited are skipped (counted as misfires), not
// fired once the consumer is done. Before, only the fire script checked, so the step fired the
// time it had planned at the read: on a busy machine, where the two scripts can be seconds apart,
// a time that came while the consumer worked.
func TestOverlapSkipSkipsWhatCameWhileTheFireWaited(t *testing.T) {
	t.Parallel()
	const period = 100 * time.Millisecond
	s := startServer(t)
	ctx := testCtx(t, time.Minute)
	var armed atomic.Bool
	read, release := make(chan struct{}), make(chan struct{})
	hold := func(_, due int) {
		if due > 0 && armed.CompareAndSwap(true, false) {
			close(read)
			<-release
		}
	}
	q := openQueue(t, singleClient(t, s.Addr), WithShards(1), withSchedStepHook(hold))
	var released sync.Once
	let := func() { released.Do(func() { close(release) }) }
	t.Cleanup(let) // before Close, which waits for the step
	if _, err := q.SetSchedule(ctx, queue.Schedule{Name: "slow", Topic: "t", Spec: "@every 100ms", Overlap: queue.OverlapSkip}); err != nil {
		t.Fatal(err)
	}
	ds, err := q.Receive(ctx, "t", 1, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	first := ds[0]
	armed.Store(true)
	select {
	case <-read:
	case <-ctx.Done():
		t.Fatal("no step read the schedule due while its fire was leased")
	}
	// Times come while the step is held after its read and the fire is still leased.
	time.Sleep(3 * period)
	acked := time.Now()
	if err := q.Ack(ctx, first.Receipt); err != nil {
		t.Fatal(err)
	}
	let()
	next := receiveN(t, ctx, q, "t", 1)[0]
	_, at, _ := queue.ParseFireID(next.ID)
	// The engine cannot know when the consumer finished: a time up to a period before the ack
	// may fire, as when its step reads just after the ack.
	if at.Before(acked.Add(-period)) {
		t.Fatalf("fire %q, nominal %v, came while %q was leased (acked at %v)", next.ID, at.Format(time.RFC3339Nano), first.ID, acked.Format(time.RFC3339Nano))
	}
	info, err := q.Schedule(ctx, "slow")
	if err != nil || info.Misfires < 3 {
		t.Fatalf("Schedule = %+v, %v; want at least 3 misfires, the times skipped", info, err)
	}
}

// TestSchedulePlannedAfterItsFire reads when each schedule is to be planned again ({T}:sact),
// atomically with its record: an OverlapAllow schedule a tenth of the time to its next nominal
// time after its fire put ahead falls due (at most 100 ms), when set and after each step; an
// OverlapSkip one at its next nominal time. Before, an OverlapAllow schedule was planned the
// instant its fire fell due: 1,000 schedules @every 1s were planned, in every process, in the
// millisecond their fires fell due, and the consumers of those fires waited for it (no
// consumer of BenchmarkRedisSchedules received a fire sooner than 46 ms after its time).
func TestSchedulePlannedAfterItsFire(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	ctx := testCtx(t, time.Minute)
	rdb := singleClient(t, s.Addr)
	q := openQueue(t, rdb, WithShards(1))
	// planned returns, read at one instant, the schedule's act time, its latest fire's nominal
	// time and its next undecided one.
	planned := func(name string) (act, last, next time.Time) {
		t.Helper()
		var rec *redis.StringCmd
		var score *redis.FloatCmd
		if _, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			rec = p.HGet(ctx, q.lay.schedKey(0), name)
			score = p.ZScore(ctx, q.lay.schedActKey(0), name)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		r, err := decodeSchedRecord(rec.Val())
		if err != nil {
			t.Fatal(err)
		}
		_, last, _ = queue.ParseFireID(r.last)
		return time.UnixMilli(int64(score.Val())), last, time.UnixMilli(r.next)
	}
	for _, c := range []struct {
		spec    string
		overlap queue.Overlap
		after   time.Duration // after the fire put ahead (OverlapAllow), or the next time (OverlapSkip)
	}{
		{"@every 1s", queue.OverlapAllow, 100 * time.Millisecond},
		{"@every 1h", queue.OverlapAllow, 100 * time.Millisecond},
		{"@every 50ms", queue.OverlapAllow, 5 * time.Millisecond},
		{"@every 10ms", queue.OverlapAllow, time.Millisecond},
		{"@every 50ms", queue.OverlapSkip, 0},
	} {
		name := strings.NewReplacer("@every ", "", " ", "").Replace(c.spec) + string(c.overlap)
		if _, err := q.SetSchedule(ctx, queue.Schedule{Name: name, Topic: "t", Spec: c.spec, Overlap: c.overlap}); err != nil {
			t.Fatal(err)
		}
		act, last, next := planned(name)
		from := last
		if c.overlap == queue.OverlapSkip {
			from = next
		}
		if want := from.Add(c.after); !act.Equal(want) {
			t.Errorf("%s (%s) set: to be planned at %v; want %v, %v after %v", c.spec, c.overlap, act, want, c.after, from)
		}
		if c.spec != "@every 50ms" {
			continue
		}
		// After steps: the fires go on, each put ahead and the schedule planned after it.
		testwait.Until(t, ctx, c.spec+" ("+string(c.overlap)+"): a step", func() bool {
			act, last, next = planned(name)
			if c.overlap == queue.OverlapSkip {
				last = next
			}
			return last.After(from)
		})
		if want := last.Add(c.after); !act.Equal(want) {
			t.Errorf("%s (%s) after a step: to be planned at %v; want %v, %v after %v", c.spec, c.overlap, act, want, c.after, last)
		}
	}
}
