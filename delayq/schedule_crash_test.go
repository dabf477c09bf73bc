package delayq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tockwheel/tock/internal/testlong"
	"github.com/tockwheel/tock/queue"
)

// The schedule crash test runs child processes (TestScheduleCrashChild) that keep schedules firing
// on a queue directory while consumers receive, ack, nack or let the leases of their fires run
// out, and another goroutine pauses, resumes and triggers a schedule; the parent kills each child
// with SIGKILL at a random moment (most a random time after it opened the queue, some while it
// opens it), and starts the next on the same directory, at once or (every fourth) after a pause of
// several periods. A round counts when its child delivered fires before its kill; one that did not
// (killed in its Open, or the machine too slow to get there) is run again, up to 20 times the
// rounds, past which the test fails. Then the parent opens the queue itself, receives until every
// schedule has caught up, and checks every delivery against the reports:
//
//   - no fire is delivered before its nominal time;
//   - no fire is delivered by a Receive that began after an Ack of it returned: a nominal time
//     fires once (a fire delivered and not acked may come again, as any message may);
//   - a schedule of MisfireAll misses no nominal time, from its first to the end, but those
//     beyond the latest MaxCatchUp of a time the queue was down;
//   - a schedule of MisfireOnce misses only nominal times that came while the queue was down, and
//     after each run of them fires one that came before the next Open returned (the missed period's
//     one fire, due at once), not merely the next on time.
//
// "Down" runs from the last moment a child's log is known durable, less a margin, to the next
// Open: a child's last returned Ack made every record before its own durable, and a fire put
// ahead after it may be lost to the kill. The fires of a period are put ahead when the previous
// one falls due, late by as much as the scheduler is late, so the margin is two periods or twice
// the child's worst lateness seen, whichever is more.

const schedCrashEnv = "DELAYQ_SCHED_CRASH_DIR"

// schedCrashPeriod is the period of the crash test's schedules.
const schedCrashPeriod = 200 * time.Millisecond

// The crash test's schedules: name prefix, count, misfire and overlap policies.
var schedCrashSets = []struct {
	prefix  string
	n       int
	misfire queue.Misfire
	overlap queue.Overlap
}{
	{"all", 12, queue.MisfireAll, queue.OverlapAllow},
	{"once", 6, queue.MisfireOnce, queue.OverlapAllow},
	{"skip", 4, queue.MisfireAll, queue.OverlapSkip},
}

func schedCrashOptions() []Option {
	return []Option{WithSegmentSize(64 << 10), WithCheckpointInterval(100 * time.Millisecond), WithHorizon(2 * time.Second),
		WithSlot(100 * time.Millisecond), WithMaxAttempts(0), WithBackoff(50*time.Millisecond, 200*time.Millisecond),
		WithCompaction(0.9, 0), WithLogger(quiet)}
}

func TestScheduleCrashChild(t *testing.T) {
	dir := os.Getenv(schedCrashEnv)
	if dir == "" {
		t.Skip("run by TestScheduleCrash")
	}
	seed, _ := strconv.ParseUint(os.Getenv("DELAYQ_SCHED_CRASH_SEED"), 10, 64)
	q, r := openCrashChild(dir, schedCrashOptions()...)
	report, fatal := r.report, r.fatal
	var seq atomic.Int64
	report("open %d", time.Now().UnixNano())
	report("ready")
	go awaitPlanned(q, func(name string, at int64) { report("planned %s %d", name, at) })
	ctx := context.Background()
	for _, set := range schedCrashSets {
		for i := range set.n {
			name := fmt.Sprintf("%s-%d", set.prefix, i)
			if info, err := q.Schedule(ctx, name); err == nil {
				report("created %s %d", name, info.Created.UnixNano())
				continue
			}
			if _, err := q.SetSchedule(ctx, queue.Schedule{Name: name, Topic: "f", Spec: "@every " + schedCrashPeriod.String(),
				Misfire: set.misfire, Overlap: set.overlap}); err != nil {
				fatal("set", err)
			}
			info, err := q.Schedule(ctx, name)
			if err != nil {
				fatal("get", err)
			}
			report("created %s %d", name, info.Created.UnixNano())
		}
	}
	if _, err := q.Schedule(ctx, "pz"); err != nil {
		if _, err := q.SetSchedule(ctx, queue.Schedule{Name: "pz", Topic: "f", Spec: "@every 100ms", Misfire: queue.MisfireOnce}); err != nil {
			fatal("set", err)
		}
	}
	go func() { // pauses, resumes and triggers "pz"
		rng := rand.New(rand.NewPCG(seed, 50))
		for {
			time.Sleep(time.Duration(20+rng.IntN(100)) * time.Millisecond)
			var err error
			switch rng.IntN(3) {
			case 0:
				err = q.PauseSchedule(ctx, "pz")
			case 1:
				err = q.ResumeSchedule(ctx, "pz")
			default:
				_, err = q.TriggerSchedule(ctx, "pz")
			}
			if err != nil {
				fatal("pz", err)
			}
		}
	}()
	for c := range 2 { // consumers
		go func() {
			rng := rand.New(rand.NewPCG(seed, 100+uint64(c)))
			for {
				start := seq.Add(1)
				ds, err := q.Receive(ctx, "f", 16, 300*time.Millisecond)
				if err != nil {
					fatal("receive", err)
				}
				now := time.Now().UnixNano()
				for _, d := range ds {
					report("recv %s %d %d", d.ID, now, start)
					switch r := rng.IntN(10); {
					case r < 7:
						began := time.Now().UnixNano()
						if err := q.Ack(ctx, d.Receipt); err != nil && !errors.Is(err, ErrUnknownReceipt) {
							fatal("ack", err)
						} else if err == nil {
							report("ack %s %d %d", d.ID, seq.Add(1), began)
						}
					case r < 9:
						if err := q.Nack(ctx, d.Receipt, 20*time.Millisecond); err != nil && !errors.Is(err, ErrUnknownReceipt) {
							fatal("nack", err)
						}
					default: // the lease runs out
					}
				}
			}
		}()
	}
	select {}
}

// awaitPlanned reports, for each of the crash test's MisfireOnce schedules, a moment by which q
// has planned it since it opened (its act time is after that moment), once that plan is durable:
// its misfires, if any, are decided by then. It looks every millisecond, until it has reported
// them all. A plan made but not yet durable is not reported: a child killed before its log
// synced loses it, and the next one plans the missed times later, with a later last time for the
// missed period's one fire (seen at load 30 to 48: six schedules' fires came after the moment
// reported, each its first nominal time after it).
func awaitPlanned(q *Queue, planned func(name string, at int64)) {
	left := map[string]bool{}
	for _, set := range schedCrashSets {
		for i := range set.n {
			if set.misfire == queue.MisfireOnce {
				left[fmt.Sprintf("%s-%d", set.prefix, i)] = true
			}
		}
	}
	for len(left) > 0 {
		// The clock is read under the lock the engine plans under: a plan made before it was made
		// by then. Read before the lock, it could precede a plan made while this waited for it.
		q.mu.Lock()
		now := time.Now().UnixNano()
		var seen []string
		for name := range left {
			if s := q.sched.get(name); s != nil && (s.act == 0 || s.act > now) {
				seen = append(seen, name)
			}
		}
		end := q.log.End() // the plans' records are in the log, under the lock they were made under
		q.mu.Unlock()
		if len(seen) > 0 {
			if err := q.waitDurable(end); err != nil {
				return // the queue failed or closed: these plans are not known durable
			}
			for _, name := range seen {
				planned(name, now)
				delete(left, name)
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// schedCrashLog is what the parent learned from the children's reports.
type schedCrashLog struct {
	created map[string]int64 // schedule: its creation (Unix ns)
	acked   map[string]int64 // fire ID: seq of an ack's return
	recvs   []crashRecv
	// up is when each child (and the drain, the last generation) opened the queue, by generation (a
	// child killed before it opened it has none); durable is when the last Ack each child saw
	// return began, and late the worst lateness of the fires it delivered first that came due
	// while it ran.
	up, durable, late map[int]int64
	seen              map[string]bool // fires delivered
	// planned is when each child had planned each MisfireOnce schedule since it opened the queue
	// (see awaitPlanned), and ended when it was dead, by generation.
	planned map[int]map[string]int64
	ended   map[int]int64
	gens    int // generations run, the drain's included
}

func (l *schedCrashLog) parse(t *testing.T, line string, gen int) {
	f := strings.Fields(line)
	num := func(i int) int64 {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			t.Fatalf("bad report %q", line)
		}
		return n
	}
	seq := func(i int) int64 { return num(i) + int64(gen)<<40 }
	switch {
	case len(f) == 2 && f[0] == "open":
		l.up[gen] = num(1)
	case len(f) == 3 && f[0] == "planned":
		if l.planned[gen] == nil {
			l.planned[gen] = map[string]int64{}
		}
		l.planned[gen][f[1]] = num(2)
	case len(f) == 3 && f[0] == "created":
		l.created[f[1]] = num(2)
	case len(f) == 4 && f[0] == "ack":
		l.acked[f[1]] = seq(2)
		l.durable[gen] = max(l.durable[gen], num(3))
	case len(f) == 4 && f[0] == "recv":
		r := crashRecv{id: f[1], at: num(2), start: seq(3), generation: gen}
		l.recvs = append(l.recvs, r)
		if _, at, ok := queue.ParseFireID(r.id); ok && !l.seen[r.id] && at.UnixNano() > l.up[gen] {
			l.late[gen] = max(l.late[gen], r.at-at.UnixNano()) // a first delivery, not a catch-up
		}
		l.seen[r.id] = true
	case len(f) > 0 && f[0] == "fatal":
		t.Fatalf("child: %s", line)
	}
	// Anything else is test-framework output, or a line cut short by the kill.
}

// downWindow reports whether nominal time at of schedule name came while the queue was down: from
// the last moment known durable (less the margin; see the test's comment) of a child that opened
// the queue to the moment the next one that opened it had planned the schedule. It returns that
// moment, and whether it was seen (planned, reported by the child) or is only bounded by the
// child's death.
func (l *schedCrashLog) downWindow(name string, at int64) (to int64, seen, ok bool) {
	for gen := range l.gens - 1 {
		if l.up[gen] == 0 {
			continue // killed before it opened the queue: it did nothing
		}
		next := gen + 1
		for l.up[next] == 0 {
			next++ // the drain, the last generation, has opened it
		}
		from := l.up[gen]
		if d := l.durable[gen]; d != 0 {
			from = d - max(2*int64(schedCrashPeriod), 2*l.late[gen])
		}
		to, seen = l.planned[next][name]
		if !seen {
			to = l.ended[next]
		}
		if at >= from && at <= to {
			return to, seen, true
		}
	}
	return 0, false, false
}

func TestScheduleCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs child processes")
	}
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	l := &schedCrashLog{created: map[string]int64{}, acked: map[string]int64{}, up: map[int]int64{}, durable: map[int]int64{},
		late: map[int]int64{}, seen: map[string]bool{}, planned: map[int]map[string]int64{}, ended: map[int]int64{}}
	rounds := testlong.Pick(8, 100)
	counted, unopened := 0, 0
	gens := killRounds(rng, rounds, func() bool { return counted >= rounds }, func(gen int, inOpen bool) {
		env := []string{schedCrashEnv + "=" + dir, fmt.Sprintf("DELAYQ_SCHED_CRASH_SEED=%d", seed+uint64(gen))}
		// Most kills land a random time after the child opened the queue, while schedules fire;
		// those killRounds counts from the start, in Open's recovery (replaying the log, planning
		// the missed fires) or before.
		after := time.Duration(100+rng.IntN(900)) * time.Millisecond
		if inOpen {
			after = time.Duration(rng.IntN(300)) * time.Millisecond
		}
		before := len(l.recvs)
		runUntilKilled(t, "TestScheduleCrashChild", env, after, inOpen, func(line string) {
			l.parse(t, line, gen)
		})
		l.gens = gen + 1
		l.ended[gen] = time.Now().UnixNano()
		if gen%4 == 3 {
			// Down for several periods: the misfire policies decide what fires at the next Open.
			time.Sleep(time.Duration(3+rng.IntN(8)) * schedCrashPeriod)
		}
		switch {
		case len(l.recvs) > before:
			counted++
		case l.up[gen] == 0:
			unopened++
		}
	})
	if counted < rounds {
		t.Fatalf("%d children run, %d delivered fires before their kill: the test did not exercise its premise", gens, counted)
	}
	q := open(t, dir, schedCrashOptions()...)
	defer q.Close()
	check(t, q)
	end := time.Now()
	l.up[l.gens] = end.UnixNano()
	l.planned[l.gens] = map[string]int64{}
	awaitPlanned(q, func(name string, at int64) { l.planned[l.gens][name] = at })
	l.gens++
	// Drain until every MisfireAll schedule has fired a nominal time at or after end (so, for an
	// OverlapAllow one, every time up to end) and nothing is leased. A child killed between a
	// Receive and its report left fires leased to no one, for the children's visibility: they
	// count only once the drain has them again. The drain acks all it takes, so what is leased is
	// theirs.
	//
	// The schedules fire on while the drain runs, about 100 fires a second in all, and the drain
	// receives them in due order. A drain slower than that (a process at the lowest priority on
	// a loaded machine, under -race) falls further behind for as long as they fire, and that
	// starves the OverlapSkip schedules, as their policy says: each puts its next fire only once
	// the drain has taken the previous one, and puts it due then, at the tail of the backlog, which
	// the drain reaches after the backlog's length times the ratio of the two rates, longer each
	// time (seen: skip fires ready in memory behind thousands of others, a backlog a minute long,
	// and a drain that waited for them while the others fired failed for want of progress). So
	// the drain pauses each OverlapAllow schedule once it is done with it: once it has put a fire
	// at or after end, all its nominal times up to end are decided, and a pause removes only a fire
	// not yet due, after end. What is left to receive is then finite, whatever the machine's speed
	// (an OverlapSkip schedule has one fire waiting at most): each delivery of it is progress, and
	// a minute without any is a schedule stuck.
	const stall = time.Minute
	ctx := context.Background()
	latest := map[string]time.Time{}
	var behind []string
	for _, set := range schedCrashSets {
		for i := range set.n {
			if set.misfire == queue.MisfireAll {
				behind = append(behind, fmt.Sprintf("%s-%d", set.prefix, i))
			}
		}
	}
	running := map[string]bool{"pz": true} // the OverlapAllow schedules the drain has not paused
	paused := map[string]bool{}
	for _, set := range schedCrashSets {
		for i := range set.n {
			if set.overlap == queue.OverlapAllow {
				running[fmt.Sprintf("%s-%d", set.prefix, i)] = true
			}
		}
	}
	progress := time.Now()
	for len(behind) > 0 || q.Snapshot().Leased > 0 {
		for name := range running {
			info, err := q.Schedule(ctx, name)
			if err != nil {
				t.Fatal(err)
			}
			if info.Paused || !info.LastFire.Before(end) {
				if err := q.PauseSchedule(ctx, name); err != nil {
					t.Fatal(err)
				}
				delete(running, name)
				paused[name] = true
			}
		}
		if time.Since(progress) > stall {
			t.Fatalf("drain: no progress for %v: %d fires leased, %d MisfireAll schedules behind %v, %d not paused; latest fires %v\n%s",
				stall, q.Snapshot().Leased, len(behind), end, len(running), latest, schedState(q, behind...))
		}
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		ds, err := q.Receive(rctx, "f", 256, time.Hour)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("drain: %v; latest fires %v", err, latest)
		}
		now := time.Now().UnixNano()
		receipts := make([]string, 0, len(ds))
		for _, d := range ds {
			l.recvs = append(l.recvs, crashRecv{id: d.ID, at: now, start: 1 << 62, generation: l.gens - 1})
			receipts = append(receipts, d.Receipt)
			name, at, ok := queue.ParseFireID(d.ID)
			if !ok {
				continue // the checks below fail it
			}
			if !at.After(end) || paused[name] || slices.Contains(behind, name) {
				progress = time.Now()
			}
			if at.After(latest[name]) {
				latest[name] = at
			}
		}
		behind = slices.DeleteFunc(behind, func(name string) bool { return !latest[name].Before(end) })
		if len(receipts) > 0 {
			if err := q.Ack(ctx, receipts...); err != nil {
				t.Fatal(err)
			}
		}
	}

	// Every delivery: never early, never after an ack of it returned.
	fired := map[string]map[int64]bool{} // schedule: nominal times delivered
	for _, r := range l.recvs {
		name, at, ok := queue.ParseFireID(r.id)
		if !ok {
			t.Fatalf("delivered %q, not a fire", r.id)
		}
		if r.at < at.UnixNano() {
			t.Errorf("%s delivered %v early (child %d)", r.id, time.Duration(at.UnixNano()-r.at), r.generation)
		}
		if s, ok := l.acked[r.id]; ok && r.start > s {
			t.Errorf("%s delivered again after its ack returned (child %d): a nominal time fired twice", r.id, r.generation)
		}
		if fired[name] == nil {
			fired[name] = map[int64]bool{}
		}
		fired[name][at.UnixNano()] = true
	}
	// Every nominal time from the first to the end: fired, or missed as the misfire policy says.
	missed, total := map[queue.Misfire]int{}, 0
	for _, set := range schedCrashSets {
		if set.overlap == queue.OverlapSkip {
			continue // its fires wait for the consumers: it skips when they hold the previous one
		}
		for i := range set.n {
			name := fmt.Sprintf("%s-%d", set.prefix, i)
			times := slices.Sorted(mapKeys(fired[name]))
			if len(times) == 0 {
				t.Errorf("schedule %s never fired", name)
				continue
			}
			if created := l.created[name]; created != 0 && times[0]-created > int64(schedCrashPeriod+2*time.Millisecond) {
				t.Errorf("schedule %s created at %v first fired at %v", name, time.Unix(0, created), time.Unix(0, times[0]))
			}
			runUpTo := int64(0) // the moment the run of missed times under way was decided, if seen
			for at := times[0]; at <= end.UnixNano(); at += int64(schedCrashPeriod) {
				total++
				if fired[name][at] {
					if runUpTo != 0 && at > runUpTo {
						t.Errorf("schedule %s (misfire %s) missed times until it was planned at %v, then fired %v, not before: not the missed period's one fire",
							name, set.misfire, time.Unix(0, runUpTo).UTC(), time.Unix(0, at).UTC())
					}
					runUpTo = 0
					continue
				}
				to, seen, down := l.downWindow(name, at)
				switch {
				case down && set.misfire == queue.MisfireOnce:
					missed[set.misfire]++
					runUpTo = 0
					if seen {
						runUpTo = to
					}
					continue
				case down && set.misfire == queue.MisfireAll && at <= to-int64(queue.MaxCatchUp-1)*int64(schedCrashPeriod):
					missed[set.misfire]++
					continue
				}
				t.Errorf("schedule %s (misfire %s) never fired %v", name, set.misfire, time.Unix(0, at).UTC())
			}
		}
	}
	t.Logf("%d rounds counted of %d children (%d killed before Open returned): %d deliveries, %d acks, %d nominal times checked, missed while down: %v",
		counted, l.gens-1, unopened, len(l.recvs), len(l.acked), total, missed)
	if len(l.acked) == 0 || missed[queue.MisfireOnce] == 0 {
		t.Errorf("%d acks returned, %d times missed by MisfireOnce schedules: the test exercised too little", len(l.acked), missed[queue.MisfireOnce])
	}
}

// schedState says, for a drain that made no progress, where the schedules named stand: their
// times, and whether the engine counts their latest fire as waiting, and where it is.
func schedState(q *Queue, names ...string) string {
	q.mu.Lock()
	defer q.mu.Unlock()
	ts := func(ns int64) string {
		if ns == 0 {
			return "0"
		}
		return time.Unix(0, ns).UTC().Format("15:04:05.000")
	}
	var b strings.Builder
	now := time.Now().UnixNano()
	fmt.Fprintf(&b, "at %s: timer at %s, loaded slot %d of %d, %d ready, %d leased\n",
		ts(now), ts(q.sched.timerAt), q.disk.loaded, q.disk.slotOf(now), q.mem.ready, q.mem.leased)
	for _, name := range names {
		s := q.sched.get(name)
		if s == nil {
			fmt.Fprintf(&b, "%s: none\n", name)
			continue
		}
		fmt.Fprintf(&b, "%s: next %s act %s fired %s paused %v misfires %d", name, ts(s.next), ts(s.act), ts(s.fired), s.paused, s.misfires)
		spec, err := q.sched.specOf(s)
		if err != nil || s.fired == 0 {
			fmt.Fprintf(&b, " (%v)\n", err)
			continue
		}
		id := spec.FireID(s.name, time.Unix(0, s.fired))
		fmt.Fprintf(&b, " waits %v:", q.stillWaitsLocked(s, spec))
		if e := q.mem.lookup(id); e != nil {
			fmt.Fprintf(&b, " in memory, state %d, due %s, attempt %d, on %q", e.st, ts(e.deliverAt), e.attempt, e.t.name)
		}
		if loc, ok := q.disk.ids[id]; ok {
			fmt.Fprintf(&b, " in the disk wheel, slot %d", loc.slot)
		}
		b.WriteString("\n")
	}
	return b.String()
}
