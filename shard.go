package tock

import (
	"math"
	"sync"
	"time"
)

// A shard is an independent part of a wheel: its own lock, nodes, hierarchy and driver goroutine.
// Scheduling goroutines pick the shard of the processor they run on, so goroutines on different
// processors rarely share a lock or a cache line.
type shard struct {
	w *Wheel

	// wake tells a sleeping driver that a timer due before its wake-up arrived. It has room for one
	// signal so that the sender never blocks.
	wake chan struct{}

	mu sync.Mutex
	slab
	cur      int64 // the next tick to process; every pending node's at is >= cur
	levels   int
	occupied [maxLevels]uint64
	heads    [maxLevels][slotCount]uint32
	pending  int                  // timers that are scheduled and have not ended
	periodic map[uint32]*periodic // the periodic timers, by node
	running  bool                 // a driver goroutine is running
	wakeAt   int64                // the tick the driver sleeps until; meaningful while running
	stopped  bool
	handoff  map[uint32]*time.Timer // after Stop, the runtime timers that took over timers with flagHandOff, by node
	batch    []func()               // callbacks that fired in the current advance

	_ [64]byte // keep shards in separate cache lines
}

func newShard(w *Wheel, levels int) *shard {
	return &shard{w: w, wake: make(chan struct{}, 1), levels: levels}
}

// scheduleLocked adds a timer due at tick at and makes sure the driver will wake up for it. p is
// nil for a one-shot timer; flags is 0 or flagHandOff.
func (s *shard) scheduleLocked(at int64, f func(), p *periodic, flags uint32) (Timer, error) {
	i, ok := s.alloc()
	if !ok {
		return Timer{}, ErrTooManyPending
	}
	n := s.node(i)
	n.f, n.at, n.state = f, at, flags
	if p != nil {
		n.state |= flagPeriodic
		p.s, p.i = s, i
		if s.periodic == nil {
			s.periodic = make(map[uint32]*periodic)
		}
		s.periodic[i] = p
	}
	s.linkLocked(i, n)
	s.pending++
	s.wakeForLocked(n.at)
	return Timer{s: s, i: i, gen: n.gen}, nil
}

// stop stops the shard for Wheel.Stop: it empties every slot, appends the handles of the timers
// that will now never fire to unfired, hands the timers that outlive the wheel to runtime timers,
// and empties the rest of the shard. A running driver notices stopped and exits; a periodic timer
// whose run is in progress is freed when the run returns.
func (s *shard) stop(unfired []Timer) []Timer {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopped = true
	for lvl := range s.levels {
		for s.occupied[lvl] != 0 {
			for i := s.detachLocked(lvl, firstSlot(s.occupied[lvl])); i != 0; {
				n := s.node(i)
				if n.state&flagHandOff != 0 {
					s.handOffLocked(i, n)
				} else {
					unfired = append(unfired, Timer{s: s, i: i, gen: n.gen})
				}
				next := n.next
				s.release(i, n)
				i = next
			}
		}
	}
	if s.w.maxPending > 0 {
		s.w.reserved.Add(-int64(s.pending)) // else a full wheel would refuse with ErrTooManyPending
	}
	s.pending = 0
	s.periodic = nil
	s.batch = nil
	return unfired
}

// wakeForLocked makes sure the driver runs at or before tick at: it starts a driver if none runs
// and wakes a sleeping one whose wake-up is later.
func (s *shard) wakeForLocked(at int64) {
	switch {
	case !s.running:
		s.running = true
		s.wakeAt = at
		go s.drive()
	case at < s.wakeAt:
		s.wakeAt = at
		select {
		case s.wake <- struct{}{}:
		default:
		}
	}
}

// fireLocked ends node i's wait: its callback joins the batch. A one-shot node is freed at once, so
// from here on Stop reports false; a periodic node stays allocated until its callback has re-armed
// it.
func (s *shard) fireLocked(i uint32, n *node) {
	s.batch = append(s.batch, n.f)
	if n.state&flagPeriodic != 0 {
		n.setStatus(stateFiring)
		return
	}
	s.endLocked()
	s.release(i, n)
}

// endLocked counts one timer as ended.
func (s *shard) endLocked() {
	s.pending--
	s.w.unreserve()
}

// drive is the shard's driver goroutine. It processes due ticks, hands their callbacks to the
// executor, and sleeps until the next tick with work. It exits when the shard is empty, so an idle
// wheel holds no goroutines, and when the wheel stops.
func (s *shard) drive() {
	returned := false
	defer func() {
		if !returned {
			s.abandoned()
		}
	}()
	var sleep *time.Timer
	for {
		now := s.w.now()
		s.mu.Lock()
		if s.stopped {
			s.running = false
			s.mu.Unlock()
			returned = true
			return
		}
		s.advanceLocked(s.w.tickOf(now))
		next, ok := s.nextLocked()
		if ok {
			s.wakeAt = next
		} else {
			s.running = false
			s.wakeAt = math.MaxInt64
		}
		batch := s.batch
		s.batch = nil
		s.mu.Unlock()

		if len(batch) > 0 {
			if s.w.exec.execute(batch) {
				s.mu.Lock()
				if s.batch == nil {
					s.batch = batch[:0]
				}
				s.mu.Unlock()
			}
		}
		if !ok {
			returned = true
			return
		}

		d := s.w.untilTick(next)
		if d <= 0 {
			continue
		}
		if sleep == nil {
			sleep = time.NewTimer(d)
		} else {
			sleep.Reset(d)
		}
		select {
		case <-sleep.C:
		case <-s.wake:
			sleep.Stop()
		case <-s.w.done:
			sleep.Stop()
			s.mu.Lock()
			s.running = false
			s.mu.Unlock()
			returned = true
			return
		}
	}
}

// abandoned hands the shard to a new driver after the running one ended without returning: an
// inline callback called runtime.Goexit (as t.FailNow does), which no recover stops.
func (s *shard) abandoned() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.running = false
	if !s.stopped && s.pending > 0 {
		s.wakeForLocked(s.cur)
	}
}
