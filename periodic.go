package tock

import "time"

// Every schedules f to run every period, at a fixed rate: the n-th run is due n periods after the
// call, however late earlier runs were, so the series does not drift. Runs never overlap: if a run
// takes longer than a period, the runs it overlapped are skipped, not made up in a burst, and the
// next run is the first one due at or after the overrunning run returned. Stop the returned timer
// ([Timer.Stop]) to end the series; Stop may be called from inside f.
//
// It returns [ErrNonPositivePeriod] if period <= 0, and otherwise the errors [Wheel.AfterFunc]
// returns.
func (w *Wheel) Every(period time.Duration, f func()) (Timer, error) {
	return w.every(period, f, false)
}

// EveryDelay schedules f to run delay from now, and then again delay after each run returns: a
// fixed delay between runs, for work whose runs must be spaced rather than kept to a rate. Stop the
// returned timer to end the series; Stop may be called from inside f.
//
// It returns [ErrNonPositivePeriod] if delay <= 0, and otherwise the errors [Wheel.AfterFunc]
// returns.
func (w *Wheel) EveryDelay(delay time.Duration, f func()) (Timer, error) {
	return w.every(delay, f, true)
}

func (w *Wheel) every(period time.Duration, f func(), fixedDelay bool) (Timer, error) {
	if period <= 0 {
		return Timer{}, ErrNonPositivePeriod
	}
	if f == nil {
		return Timer{}, ErrNilFunc
	}
	p := &periodic{f: f, period: period, fixedDelay: fixedDelay}
	p.next = addClamped(w.now(), period)
	return w.schedule(w.tickAt(p.next), p.run, p, 0)
}

// A periodic is the state of a timer from Every or EveryDelay beyond its node. Its run method is the
// node's callback: it runs f and then places the node again, so runs never overlap. Fields other
// than f are guarded by the shard's lock.
type periodic struct {
	s          *shard
	i          uint32 // the node
	f          func()
	period     time.Duration
	fixedDelay bool
	next       int64 // when the pending or running run is due, in nanoseconds since the epoch
	reset      bool  // Reset set next while a run was in progress
}

func (p *periodic) run() {
	defer p.rearm() // deferred so that a callback calling runtime.Goexit does not end the series
	p.s.w.runOne(p.f)
}

// resetNext returns when the run after a Reset(d) at now is due. A d more than a period in the past
// is taken modulo the period, which keeps the runs that follow (they are counted from the result)
// and keeps rearm's arithmetic within int64.
func (p *periodic) resetNext(now int64, d time.Duration) int64 {
	if d < -p.period {
		d %= p.period
	}
	return addClamped(now, d)
}

// rearm places the node again for the next run, or frees it if the series was stopped meanwhile.
func (p *periodic) rearm() {
	s, w := p.s, p.s.w
	now := w.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.node(p.i)
	if s.stopped || n.status() != stateFiring {
		delete(s.periodic, p.i)
		s.release(p.i, n)
		return
	}
	switch {
	case p.reset:
		p.reset = false
	case p.fixedDelay:
		p.next = addClamped(now, p.period)
	default:
		next := addClamped(p.next, p.period)
		if next < now {
			missed := (now - p.next + int64(p.period) - 1) / int64(p.period)
			next = addClamped(p.next, time.Duration(missed)*p.period)
		}
		p.next = next
	}
	n.at = w.tickAt(p.next)
	s.linkLocked(p.i, n)
	s.wakeForLocked(n.at)
}
