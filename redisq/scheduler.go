package redisq

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/internal/rediskit"
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
	// (OverlapAllow) have a whole period of slack; an OverlapSkip fire is put up to this late.
	maxSchedStagger = 10 * time.Millisecond
	// schedRetry is how long after a failed step it is tried again.
	schedRetry = 500 * time.Millisecond
)

// A schedShard fires the schedules of one shard in this process. Every process does, for every
// shard: no process owns a schedule, and the schedule script's check of each schedule's next
// undecided time (with its version) lets one fire of each nominal time through, whichever process
// sends it first. It keeps the shard's earliest act time, learnt from script replies and from the
// shard's events ("s <ms|->", published by every script that changes it), on one timer.
type schedShard struct {
	q       *Queue
	i       int
	stagger time.Duration

	mu struct {
		sync.Mutex
		known   bool  // act is the shard's (false until the first step after subscribing)
		act     int64 // the earliest act time (Redis ms); -1 none
		timer   tock.Timer
		timerAt int64
		busy    bool // a step runs
		again   bool // run again when it ends
		stopped bool
	}
}

func newSchedShard(q *Queue, i int) *schedShard {
	s := &schedShard{q: q, i: i, stagger: time.Duration(rand.Int64N(int64(maxSchedStagger)))}
	s.mu.act = -1
	return s
}

// earlier lowers the act time to act (Redis ms; -1: no news) when it is earlier.
func (s *schedShard) earlier(act int64) {
	if act < 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.act < 0 || act < s.mu.act {
		s.mu.act = act
	}
	s.armLocked()
}

// event applies the shard's event: its earliest act time now.
func (s *schedShard) event(act int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.act = act
	s.armLocked()
}

// unknown forgets the act time, after events may have been lost; a step reads it.
func (s *schedShard) unknown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.known = false
	s.kickLocked()
}

func (s *schedShard) armLocked() {
	if s.mu.stopped || s.mu.busy {
		return
	}
	if !s.mu.known {
		s.kickLocked()
		return
	}
	at := int64(0)
	if s.mu.act >= 0 {
		at = s.mu.act + s.stagger.Milliseconds()
	}
	if at == s.mu.timerAt {
		return
	}
	s.mu.timer.Stop()
	s.mu.timerAt = at
	if at == 0 {
		return
	}
	t, err := s.q.wheel.AfterFunc(s.q.clock.until(at), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.mu.timerAt == at {
			s.mu.timerAt = 0
			s.kickLocked()
		}
	})
	if err != nil {
		s.mu.timerAt = 0
		return
	}
	s.mu.timer = t
}

func (s *schedShard) kickLocked() {
	if s.mu.stopped {
		return
	}
	if s.mu.busy {
		s.mu.again = true
		return
	}
	s.mu.timer.Stop()
	s.mu.timerAt = 0
	s.mu.busy = true
	s.q.wg.Add(1)
	go s.run()
}

// run steps until the shard has nothing due, then sets the timer.
func (s *schedShard) run() {
	defer s.q.wg.Done()
	for {
		act, more, err := s.step()
		s.mu.Lock()
		if s.mu.stopped || s.q.closed.Load() {
			s.mu.busy = false
			s.mu.Unlock()
			return
		}
		if err != nil {
			// A refusal for the deployment's stamp is the shard drivers' to reconcile (they read
			// every shard when subscriptions are made again): retry after a while.
			s.q.logger().Warn("redisq: firing schedules failed; retrying", "shard", s.i, "error", err)
			s.mu.busy, s.mu.again = false, false
			s.mu.known = true
			s.mu.act = s.q.clock.now() + schedRetry.Milliseconds()
			s.armLocked()
			s.mu.Unlock()
			return
		}
		if more || s.mu.again {
			s.mu.again = false
			s.mu.Unlock()
			continue
		}
		s.mu.busy, s.mu.known, s.mu.act = false, true, act
		s.armLocked()
		s.mu.Unlock()
		return
	}
}

// step reads the shard's schedules whose act time has come, plans each, and fires them in one
// script. It returns the shard's earliest act time after it, and whether more were due than it
// took.
func (s *schedShard) step() (act int64, more bool, err error) {
	q := s.q
	ctx, cancel := context.WithTimeout(context.Background(), actTimeout)
	defer cancel()
	v, err := schedDueScript.Run(ctx, q.rdb, q.lay.keys(s.i), q.withStamp(schedBudget)...).Slice()
	if err != nil {
		if q.cluster != nil && rediskit.Reloads(err) {
			q.cluster.ReloadState(context.Background())
		}
		return 0, false, fmt.Errorf("read due schedules: %w", err)
	}
	if len(v) < 3 || len(v)%2 != 1 {
		return 0, false, fmt.Errorf("%w: scheddue script replied %v", ErrProtocol, v)
	}
	nowMs, _ := v[0].(int64)
	act, _ = v[1].(int64)
	m, _ := v[2].(int64)
	q.clock.observe(nowMs)
	now := time.UnixMilli(nowMs)
	args := []any{"fire", 0}
	k := 0
	var acts []int64
	for j := 3; j+1 < len(v); j += 2 {
		name, raw := anyStr(v[j]), anyStr(v[j+1])
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
		check := ""
		if rec.overlap == "skip" {
			check = "1"
		}
		args = append(args, name, strconv.FormatInt(rec.gen, 10), strconv.FormatInt(rec.next, 10),
			millisOr(p.Next), millisOr(p.Act), p.Missed, check)
		args = fireArgs(args, spec, name, p.Fire)
		acts = append(acts, millisOr(p.Act))
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
	s.mu.stopped = true
	s.mu.timer.Stop()
}
