package tock

import "time"

// A Timer is a handle to a timer scheduled on a [Wheel]. It is a small value: copy it freely and
// compare it with ==. The zero Timer refers to no timer; its Stop and Reset return false.
//
// A handle names its timer's node and the node's generation, and the wheel recycles nodes, so a
// handle kept after its timer fired or was stopped is stale: it can never stop or reset the timer
// that reuses the node. (Strictly, only a node reused a multiple of 2^32 times could alias.)
//
// Timer methods are safe for concurrent use, also with the timer firing: the wheel decides each
// race under one lock, and exactly one of "Stop returned true" and "the callback ran" happens for a
// one-shot timer.
type Timer struct {
	s   *shard
	i   uint32
	gen uint32
}

// Stop prevents the timer from firing. It returns true if the call stopped the timer, and false if
// the timer had already fired (its callback has run, is running, or is about to run), had been
// stopped before, or its wheel was stopped. Stop does not wait for a running callback.
//
// For a timer from [Wheel.Every] or [Wheel.EveryDelay], Stop ends the series: no run starts after
// Stop returns, and a run in progress (Stop may be called from inside it) finishes. Stop returns
// true if it ended the series.
func (t Timer) Stop() bool {
	s := t.s
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.node(t.i)
	if n.gen != t.gen {
		return false
	}
	if s.stopped {
		return s.stopHandedOffLocked(t.i)
	}
	switch n.status() {
	case statePending:
		s.unlinkLocked(t.i, n)
		s.endLocked()
		if n.state&flagPeriodic != 0 {
			delete(s.periodic, t.i)
		}
		s.release(t.i, n)
		return true
	case stateFiring:
		n.setStatus(stateCancelled)
		s.endLocked()
		return true
	}
	return false
}

// Reset changes a pending timer to fire d from now, as if it had just been scheduled with d, and
// returns true. It does nothing and returns false if the timer has already fired, has been
// stopped, or its wheel was stopped: the timer's node may already serve another timer, so schedule
// a new one with [Wheel.AfterFunc] instead.
//
// For a timer from [Wheel.Every] or [Wheel.EveryDelay], Reset moves the next run to d from now and
// counts later runs from there; called while a run is in progress, it sets the run after that one.
// Reset returns true as long as the series has not been stopped.
func (t Timer) Reset(d time.Duration) bool {
	s := t.s
	if s == nil {
		return false
	}
	now := s.w.now()
	at := s.w.tickAt(addClamped(now, d))
	s.mu.Lock()
	defer s.mu.Unlock()
	n := s.node(t.i)
	if n.gen != t.gen || s.stopped {
		return false
	}
	switch n.status() {
	case statePending:
		if n.state&flagPeriodic != 0 {
			p := s.periodic[t.i]
			p.next = p.resetNext(now, d)
		}
		s.moveLocked(t.i, n, at)
		s.wakeForLocked(n.at)
		return true
	case stateFiring:
		p := s.periodic[t.i]
		p.next, p.reset = p.resetNext(now, d), true
		return true
	}
	return false
}
