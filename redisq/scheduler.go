package redisq

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/tockwheel/tock/internal/rediskit"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/schedule"
)

// Firing parameters.
const (
	// schedBudget bounds the schedules one step plans and fires: one script reads them, one fires
	// them.
	schedBudget = 500
	// maxSchedStagger bounds how much later than the act time each process steps in: the process
	// with the least stagger of a shard usually fires its schedules alone, and the others find
	// them fired (their fire is refused, harmlessly, if they came in between). Fires put ahead
	// (OverlapAllow) have nine tenths of a period of slack; an OverlapSkip fire is put up to
	// this late.
	maxSchedStagger = 10 * time.Millisecond
	// schedRetry is how long after a failed step it is tried again.
	schedRetry = 500 * time.Millisecond
	// maxPlanDelay bounds how long after its fire put ahead falls due an OverlapAllow schedule is
	// planned again (see actTime).
	maxPlanDelay = 100 * time.Millisecond
)

// actTime returns when a schedule is to be planned again after plan p (Redis ms; -1: never).
// Under OverlapSkip that is p.Act, its next nominal time. Under OverlapAllow, p.Act is when the
// fire put ahead falls due, and the schedule is planned a tenth of the time from it to the next
// nominal time later (at most maxPlanDelay): schedules of the same period fire in the same
// millisecond, and planning the next fires then (in every process: reading the schedules,
// planning them, putting their fires) took Redis's and the processes' time from the receives of
// the fires just due. The next fire is still put ahead by nine tenths of a period at least.
func actTime(p schedule.Plan, skip bool) int64 {
	act := millisOr(p.Act)
	if skip || p.Act.IsZero() || p.Next.IsZero() {
		return act
	}
	return act + min(p.Next.Sub(p.Act)/10, maxPlanDelay).Milliseconds()
}

// A schedShard fires the schedules of one shard in this process. Every process does, for every
// shard: no process owns a schedule, and the schedule script's check of each schedule's next
// undecided time (with its version) lets one fire of each nominal time through, whichever process
// sends it first. It keeps the shard's earliest act time, learnt from script replies and from the
// shard's events ("s <ms|->", published by every script that changes it), on one timer, which is
// never set further than the recheck period (WithRecheck) ahead: whatever it missed, a driver
// reads its shard again at least that often.
type schedShard struct {
	q       *Queue
	i       int
	stagger time.Duration

	mu struct {
		sync.Mutex
		known bool  // act is the shard's (false until the first step after subscribing)
		act   int64 // the earliest act time (Redis ms); -1 none
		// learnt is the earliest act time learnt from replies and events while a step ran (-1:
		// none): the step may have read the shard before the change they tell of, so what it read
		// does not replace them.
		learnt int64
		run    runner
	}
}

func newSchedShard(q *Queue, i int) *schedShard {
	s := &schedShard{q: q, i: i, stagger: time.Duration(rand.Int64N(int64(maxSchedStagger)))}
	s.mu.act, s.mu.learnt = -1, -1
	s.mu.run.init(q, &s.mu.Mutex, s.run)
	return s
}

// earlier lowers the act time to act (Redis ms; -1: no news) when it is earlier.
func (s *schedShard) earlier(act int64) {
	if act < 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.learnLocked(act)
	if s.mu.act < 0 || act < s.mu.act {
		s.mu.act = act
	}
	s.armLocked()
}

// event applies the shard's event: its earliest act time now.
func (s *schedShard) event(act int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.learnLocked(act)
	s.mu.act = act
	s.armLocked()
}

// learnLocked keeps an act time learnt while a step runs, for the step's end.
func (s *schedShard) learnLocked(act int64) {
	if s.mu.run.busy {
		s.mu.learnt = earliest(s.mu.learnt, act)
	}
}

// unknown forgets the act time, after events may have been lost; a step reads it.
func (s *schedShard) unknown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.known = false
	s.mu.run.kickLocked()
}

// armLocked sets the timer for the earliest act time, this process's stagger later.
func (s *schedShard) armLocked() {
	if !s.mu.run.idleLocked() {
		return
	}
	if !s.mu.known {
		s.mu.run.kickLocked()
		return
	}
	at := s.q.clock.now() + s.q.cfg.recheck.Milliseconds()
	if s.mu.act >= 0 {
		at = min(at, s.mu.act+s.stagger.Milliseconds())
	}
	s.mu.run.setTimerLocked(at)
}

// run steps once, and again at once while the shard has more due than a step takes; then it sets
// the timer. A shard that refuses the deployment's stamp (Redis lost its data, or the deployment
// was made anew) makes the process reconcile first, as the housekeeping does: the step's
// schedules are read again with the stamp then, and a process that refuses to serve the
// deployment stops firing.
func (s *schedShard) run() {
	act, more, err := s.step()
	if isStampErr(err) {
		ctx, cancel := context.WithTimeout(context.Background(), actTimeout)
		if _, err = s.q.afterStampErr(ctx, err); err == nil {
			more = true
		}
		cancel()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	again := s.mu.run.endLocked()
	learnt := s.mu.learnt
	s.mu.learnt = -1
	if s.q.staleErr() != nil || s.mu.run.stopped || s.q.closed.Load() {
		return
	}
	if err != nil {
		s.q.logger().Warn("redisq: firing schedules failed; retrying", "shard", s.i, "error", err)
		s.mu.known = true
		s.mu.act = earliest(learnt, s.q.clock.now()+schedRetry.Milliseconds())
		s.armLocked()
		return
	}
	if more || again {
		s.mu.run.kickLocked()
		return
	}
	// The step may have read the shard before a change told of while it ran (a SetSchedule,
	// another process's fire): its act time alone would hide that change's, for good on a shard
	// with nothing else to fire.
	s.mu.known, s.mu.act = true, earliest(act, learnt)
	s.armLocked()
}

// step reads the shard's schedules whose act time has come, plans each, and fires them in one
// script. It returns the shard's earliest act time after it, and whether more were due than it
// took.
func (s *schedShard) step() (act int64, more bool, err error) {
	q := s.q
	ctx, cancel := context.WithTimeout(context.Background(), actTimeout)
	defer cancel()
	topics := q.waitedTopics()
	args := make([]any, 0, 1+len(topics))
	args = append(args, schedBudget)
	for _, t := range topics {
		args = append(args, t)
	}
	sent := time.Now()
	v, err := schedDueScript.Run(ctx, q.rdb, q.lay.keys(s.i), q.withStamp(args...)...).Slice()
	if err != nil {
		if q.cluster != nil && rediskit.Reloads(err) {
			q.cluster.ReloadState(context.Background())
		}
		return 0, false, fmt.Errorf("read due schedules: %w", err)
	}
	h := 3 + len(topics)
	if len(v) < h || (len(v)-h)%3 != 0 {
		return 0, false, fmt.Errorf("%w: scheddue script replied %v", ErrProtocol, v)
	}
	if q.cfg.schedStepHook != nil {
		q.cfg.schedStepHook(s.i, (len(v)-h)/3)
	}
	nowMs, _ := v[0].(int64)
	act, _ = v[1].(int64)
	m, _ := v[2].(int64)
	q.clock.observe(nowMs, sent)
	for i, t := range topics {
		head, _ := v[3+i].(int64)
		q.floorHead(t, s.i, head, nowMs)
	}
	now := time.UnixMilli(nowMs)
	args = []any{"fire", 0}
	k := 0
	var acts []int64
	for j := h; j+2 < len(v); j += 3 {
		name, raw := anyStr(v[j]), anyStr(v[j+1])
		waits, _ := v[j+2].(int64)
		rec, err := decodeSchedRecord(raw)
		if err != nil {
			return 0, false, fmt.Errorf("schedule %q: %w", name, err)
		}
		spec, err := schedule.Parse(rec.spec, rec.zone, time.UnixMilli(rec.start))
		if err != nil {
			// Another process set it with a time zone this one does not know.
			q.logger().Warn("redisq: a schedule cannot be planned here; leaving it to other processes", "schedule", name, "error", err)
			acts = append(acts, nowMs+schedRetry.Milliseconds())
			continue
		}
		next := time.Time{}
		if rec.next >= 0 {
			next = time.UnixMilli(rec.next)
		}
		p := spec.Plan(next, now, rec.misfire, rec.overlap)
		if waits == 1 {
			// An OverlapSkip schedule whose latest fire waited at the read: the times the plan
			// fires came while it waited, so they are skipped, as the fire script skips them when
			// the fire still waits there. Checking only there would fire, once the consumer is
			// done, a time that came while it worked (the read and the fire script may be
			// seconds apart on a busy machine).
			p.Missed += len(p.Fire)
			p.Fire = nil
		}
		skip := rec.overlap == queue.OverlapSkip
		check := ""
		if skip {
			check = "1"
		}
		act := actTime(p, skip)
		args = append(args, name, strconv.FormatInt(rec.gen, 10), strconv.FormatInt(rec.next, 10),
			millisOr(p.Next), act, p.Missed, check)
		args = fireArgs(args, spec, name, p.Fire)
		acts = append(acts, act)
		k++
	}
	if k > 0 {
		args[1] = k
		r := &request{kind: opScript, shard: s.i, script: scheduleScript, args: func(int, bool) []any { return args }}
		if err := q.writer.do(ctx, r); err != nil {
			return 0, false, fmt.Errorf("fire schedules: %w", err)
		}
	}
	for _, a := range acts {
		act = earliest(act, a)
	}
	return act, m == 1, nil
}

func (s *schedShard) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.run.stopLocked()
}
