package tock

import (
	"log/slog"
	"math"
	"math/bits"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"
)

// A Wheel schedules callbacks to run after a duration, like [time.AfterFunc], on a hierarchical
// timing wheel: scheduling, stopping and resetting a timer take constant time and allocate nothing
// however many timers are pending, and a pending timer costs 48 bytes.
//
// A Wheel is safe for concurrent use by any number of goroutines. It starts its goroutines when the
// first timer is scheduled and lets them exit when no timer is pending. Create one with [New]; the
// zero Wheel is not usable.
type Wheel struct {
	tick   int64  // nanoseconds
	recip  uint64 // floor((2^64-1) / tick), for divTick
	epoch  time.Time
	levels int
	shards []*shard
	hints  sync.Pool // *shardHint: which shard the current processor schedules on
	nhints atomic.Uint32
	exec   executor

	maxPending int64
	reserved   atomic.Int64 // pending timers counted against maxPending; used only when it is set

	onPanic func(recovered any)

	stopOnce sync.Once
	done     chan struct{} // closed by Stop
}

type shardHint struct{ s *shard }

// New returns a wheel configured by opts. Without options it has a 1 ms tick, no bound on pending
// timers, one shard per processor, and runs callbacks on a pool of at most [DefaultPoolSize]
// goroutines. A nil Option is ignored. New panics on an invalid option value, naming the option (as
// documented with each option), since only a bug in the calling program can pass one.
func New(opts ...Option) *Wheel {
	c := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.bad != "" {
		panic(c.bad)
	}
	w := &Wheel{
		tick:       int64(c.tick),
		epoch:      time.Now(),
		maxPending: int64(c.maxPending),
		onPanic:    c.onPanic,
		done:       make(chan struct{}),
	}
	w.recip = math.MaxUint64 / uint64(w.tick)
	w.levels = levelsFor(w.tickAt(math.MaxInt64))
	w.shards = make([]*shard, c.shards)
	for i := range w.shards {
		w.shards[i] = newShard(w, w.levels)
	}
	w.hints.New = func() any {
		return &shardHint{w.shards[int(w.nhints.Add(1)-1)%len(w.shards)]}
	}
	switch c.executor {
	case executorInline:
		w.exec = inline{w}
	case executorGoroutine:
		w.exec = perGoroutine{w}
	default:
		w.exec = &pool{w: w, max: c.poolSize}
	}
	return w
}

// AfterFunc schedules f to run once, d from now, and returns a handle to stop or reset it. f runs
// no earlier than d from now and at most about one tick later (see [WithTick]), on the wheel's
// executor. A d of zero or less means as soon as possible: by the next tick.
//
// It returns [ErrStopped] if the wheel has been stopped, [ErrTooManyPending] if the bound set with
// [WithMaxPending] is reached, and [ErrNilFunc] if f is nil.
func (w *Wheel) AfterFunc(d time.Duration, f func()) (Timer, error) {
	return w.schedule(w.deadline(d), f, nil, 0)
}

// AtFunc schedules f to run once at t, as [Wheel.AfterFunc] does for [time.Until](t). A t in the
// past means as soon as possible.
func (w *Wheel) AtFunc(t time.Time, f func()) (Timer, error) {
	return w.AfterFunc(time.Until(t), f)
}

// Pending returns the number of timers that are scheduled and have neither fired nor been stopped.
// A periodic timer counts until it is stopped. The count is exact at the moment each shard is
// read, and 0 after Stop.
func (w *Wheel) Pending() int {
	n := 0
	for _, s := range w.shards {
		s.mu.Lock()
		n += s.pending
		s.mu.Unlock()
	}
	return n
}

// Stop stops the wheel and returns the timers that were pending and will now never fire, in no
// particular order. Callbacks that had fired before Stop may still be running or about to run;
// Stop does not wait for them. After Stop, scheduling returns [ErrStopped], and [Timer.Stop] and
// [Timer.Reset] of any timer of the wheel return false. A second call returns nil.
//
// Contexts from the wheel's [Wheel.WithTimeout] and [Wheel.WithDeadline] keep their deadlines:
// runtime timers take over theirs, and they are not among the timers returned.
func (w *Wheel) Stop() []Timer {
	var unfired []Timer
	w.stopOnce.Do(func() {
		for _, s := range w.shards {
			unfired = s.stop(unfired)
		}
		close(w.done)
	})
	return unfired
}

// schedule adds a timer due at tick at on the current processor's shard. p is nil for a one-shot
// timer, else the periodic record whose run method is f. flags is flagHandOff for a timer that
// outlives the wheel (see handoff.go), else 0.
func (w *Wheel) schedule(at int64, f func(), p *periodic, flags uint32) (Timer, error) {
	if f == nil {
		return Timer{}, ErrNilFunc
	}
	if !w.reserve() {
		return Timer{}, ErrTooManyPending
	}
	s := w.shard()
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		w.unreserve()
		return Timer{}, ErrStopped
	}
	t, err := s.scheduleLocked(at, f, p, flags)
	s.mu.Unlock()
	if err != nil {
		w.unreserve()
	}
	return t, err
}

// shard returns the shard of the processor the caller runs on. sync.Pool keeps one hint per
// processor, which is what makes goroutines on different processors use different shards.
func (w *Wheel) shard() *shard {
	if len(w.shards) == 1 {
		return w.shards[0]
	}
	h := w.hints.Get().(*shardHint)
	s := h.s
	w.hints.Put(h)
	return s
}

// reserve counts a new timer against the WithMaxPending bound, reporting false if it is reached.
func (w *Wheel) reserve() bool {
	if w.maxPending <= 0 {
		return true
	}
	if w.reserved.Add(1) > w.maxPending {
		w.reserved.Add(-1)
		return false
	}
	return true
}

func (w *Wheel) unreserve() {
	if w.maxPending > 0 {
		w.reserved.Add(-1)
	}
}

// now returns the time since the wheel's epoch on the monotonic clock, in nanoseconds.
func (w *Wheel) now() int64 {
	return int64(time.Since(w.epoch))
}

// deadline returns the tick of a timer due d from now.
func (w *Wheel) deadline(d time.Duration) int64 {
	return w.tickAt(addClamped(w.now(), d))
}

// addClamped returns ns+d, saturating at the largest int64 instead of overflowing.
func addClamped(ns int64, d time.Duration) int64 {
	at := ns + int64(d)
	if d > 0 && at < ns {
		return math.MaxInt64
	}
	return at
}

// tickAt returns the first tick at or after ns nanoseconds since the epoch: rounding up is what
// keeps timers from firing early.
func (w *Wheel) tickAt(ns int64) int64 {
	if ns <= 0 {
		return 0
	}
	t, rem := w.divTick(ns)
	if rem != 0 {
		t++
	}
	return t
}

// untilTick returns the time from now until tick t starts. A tick whose start lies beyond the
// largest int64 nanosecond, such as the deadline of a timer scheduled for math.MaxInt64, is never
// reached, since the clock saturates there: the wait is then the longest there is.
func (w *Wheel) untilTick(t int64) time.Duration {
	if t > math.MaxInt64/w.tick {
		return math.MaxInt64
	}
	return time.Duration(t*w.tick - w.now())
}

// tickOf returns the last tick at or before ns nanoseconds since the epoch.
func (w *Wheel) tickOf(ns int64) int64 {
	t, _ := w.divTick(ns)
	return t
}

// divTick divides a non-negative ns by the tick. A 64-bit division is one of the slowest
// instructions on the scheduling path, so it multiplies by the tick's reciprocal instead, which
// gives the quotient or one less, and corrects that with the remainder.
func (w *Wheel) divTick(ns int64) (q, rem int64) {
	hi, _ := bits.Mul64(uint64(ns), w.recip)
	q = int64(hi)
	rem = ns - q*w.tick
	if rem >= w.tick {
		q++
		rem -= w.tick
	}
	return q, rem
}

func (w *Wheel) reportPanic(r any) {
	if w.onPanic != nil {
		w.onPanic(r)
		return
	}
	slog.Error("tock: timer callback panicked", "panic", r, "stack", string(debug.Stack()))
}
