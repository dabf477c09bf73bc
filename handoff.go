package tock

import "time"

// Hand-off. A timer scheduled with scheduleHandOff outlives its wheel: if the wheel stops while the
// timer is pending, a runtime timer (time.AfterFunc) takes over the rest of its wait and runs its
// callback at its deadline, and the timer's handle stops that runtime timer from then on, so the
// timer keeps its promise that exactly one of "Stop returned true" and "the callback ran" happens.
// Such a timer is not among those Wheel.Stop returns, since nobody is left to act on it.
//
// The contexts of WithDeadline use it, so that a deadline holds whatever becomes of the wheel.
// Only one-shot timers are handed off. Reset of a handed-off timer returns false, as it does for
// every timer of a stopped wheel.

// scheduleHandOff adds a one-shot timer due at tick at that outlives the wheel.
func (w *Wheel) scheduleHandOff(at int64, f func()) (Timer, error) {
	return w.schedule(at, f, nil, flagHandOff)
}

// handOffLocked gives the rest of node i's wait to a runtime timer, as the shard stops. The node is
// freed by the caller; its index stays the key under which Timer.Stop finds the runtime timer,
// since a stopped shard never hands the node out again.
func (s *shard) handOffLocked(i uint32, n *node) {
	if s.handoff == nil {
		s.handoff = make(map[uint32]*time.Timer)
	}
	s.handoff[i] = time.AfterFunc(s.w.untilTick(n.at), n.f)
}

// stopHandedOffLocked stops the runtime timer that took over node i when the shard stopped, if
// there is one, and reports whether that stopped it before it fired.
func (s *shard) stopHandedOffLocked(i uint32) bool {
	rt, ok := s.handoff[i]
	if !ok {
		return false
	}
	delete(s.handoff, i)
	return rt.Stop()
}
