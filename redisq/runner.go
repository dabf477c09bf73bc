package redisq

import (
	"errors"
	"sync"
	"time"

	"github.com/tockwheel/tock"
)

// A runner runs the work of one of this process's drivers of a shard (the housekeeping's, shard.go;
// the schedules', scheduler.go) on a goroutine of its own, one run at a time: at once when kicked,
// or when its timer, set for a time of the Redis clock, fires. A kick while the work runs makes it
// run again when it ends. Its fields are guarded by the driver's mutex, mu, which its timer takes.
type runner struct {
	q    *Queue
	mu   *sync.Mutex
	work func() // the driver's run; it calls endLocked when it ends

	timer   tock.Timer
	spare   *time.Timer // the timer, when the wheel refused it (a shared wheel at its WithMaxPending)
	timerAt int64       // the Redis time the timer is set for; 0 when none
	busy    bool        // work runs
	again   bool        // work was kicked while it ran
	stopped bool
}

func (r *runner) init(q *Queue, mu *sync.Mutex, work func()) {
	r.q, r.mu, r.work = q, mu, work
}

// setTimerLocked sets the timer to kick the work at the Redis time at, in place of the one set (0:
// no timer).
func (r *runner) setTimerLocked(at int64) {
	if at == r.timerAt {
		return
	}
	r.stopTimerLocked()
	r.timerAt = at
	if at == 0 {
		return
	}
	fire := func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		if r.timerAt != at {
			return // set again since
		}
		r.timerAt = 0
		r.kickLocked()
	}
	d := r.q.clock.until(at)
	t, err := r.q.wheel.AfterFunc(d, fire)
	switch {
	case err == nil:
		r.timer = t
	case errors.Is(err, tock.ErrStopped) || r.q.closed.Load():
		r.timerAt = 0 // closing
	default:
		// A driver without its timer would wait for an event that may never come.
		r.q.logger().Warn("redisq: the wheel refused a timer; set on the runtime's timers instead", "error", err)
		r.spare = time.AfterFunc(d, fire)
	}
}

// stopTimerLocked stops the timer, wherever it is set.
func (r *runner) stopTimerLocked() {
	r.timer.Stop()
	if r.spare != nil {
		r.spare.Stop()
		r.spare = nil
	}
}

// kickLocked starts the work and stops the timer, unless the work runs: then it runs again when it
// ends. It does nothing once stopped.
func (r *runner) kickLocked() {
	if r.stopped {
		return
	}
	if r.busy {
		r.again = true
		return
	}
	r.stopTimerLocked()
	r.timerAt = 0
	r.busy = true
	r.q.wg.Add(1)
	go func() {
		defer r.q.wg.Done()
		r.work()
	}()
}

// endLocked ends a run of the work, and reports whether it was kicked while it ran (the driver then
// kicks it again rather than set its timer).
func (r *runner) endLocked() (again bool) {
	again = r.again
	r.busy, r.again = false, false
	return again
}

// idleLocked reports whether the driver may set its timer: the work does not run, and the runner
// is not stopped.
func (r *runner) idleLocked() bool { return !r.busy && !r.stopped }

// stopLocked stops the runner for good: its timer is stopped, and kicks do nothing.
func (r *runner) stopLocked() {
	r.stopped = true
	r.stopTimerLocked()
}
