package retry

import (
	"context"
	"fmt"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"github.com/tockwheel/tock"
)

// A Queue retries failed operations in the background, each under a key, until they succeed, fail
// permanently, or run out of attempts or time: the failback of an RPC framework, which re-sends a
// failed call or re-registers with a registry later while the caller goes on.
//
// A key waiting for its next attempt is a timer on the wheel and a small entry in a map: no
// goroutine and no runtime timer, so a hundred thousand waiting keys cost a few tens of megabytes
// at most. Due attempts run on a bounded set of worker goroutines ([WithWorkers]) that exist only
// while attempts are due, so a slow operation never holds up the wheel or other keys beyond that
// bound.
//
// A Queue is safe for concurrent use by any number of goroutines.
type Queue struct {
	w        *tock.Wheel
	ownWheel bool // w was made by New, and Close stops it
	cfg      config

	ctx    context.Context // the parent of attempts' contexts, canceled by Close
	cancel context.CancelFunc

	mu       sync.Mutex
	entries  map[string]*entry // every key in the queue, whatever its state
	ready    []*entry          // due entries waiting for a worker, oldest first; may hold removed ones
	workers  int               // running worker goroutines
	closed   bool
	leftover []string // keys whose attempt was running at Close and then failed
	wg       sync.WaitGroup
}

// An entry is one key in the queue. Its fields other than the constant ones are guarded by q.mu.
type entry struct {
	q     *Queue
	key   string
	op    func(context.Context) error
	first time.Time // when Add was called; WithMaxElapsed counts from it
	fire  func()    // e.due, made once and given to the wheel for every attempt

	timer    tock.Timer         // the wheel timer of the next attempt, while waiting
	cancel   context.CancelFunc // cancels the running attempt's context, while running
	attempts int
	state    entryState
}

type entryState uint8

const (
	waiting entryState = iota // a timer on the wheel will make it ready
	ready                     // in q.ready, waiting for a worker
	running                   // a worker runs its operation
	removed                   // out of the queue: succeeded, gave up, canceled or closed
)

// New returns a queue configured by opts. It times attempts on the wheel of [WithWheel], or on a
// wheel of its own that [Queue.Close] stops. The queue holds no goroutine while no attempt is due.
// Close it when done with it.
//
// New panics if an option is invalid, with an error that wraps [ErrInvalidOption] and names the
// option, since only a bug in the calling program can pass one; a program that builds options from
// configuration checks the values first.
func New(opts ...Option) *Queue {
	cfg, err := newConfig(opts)
	if err != nil {
		panic(err)
	}
	q := &Queue{
		w:       cfg.wheel,
		cfg:     cfg,
		entries: make(map[string]*entry),
	}
	if q.w == nil {
		// Wheel callbacks here only queue an entry or cancel a context, which never blocks, so
		// they run on the wheel's own goroutines.
		q.w, q.ownWheel = tock.New(tock.WithInlineExecutor()), true
	}
	q.ctx, q.cancel = context.WithCancel(context.Background())
	return q
}

// Add puts key in the queue to run op until it succeeds (returns nil), returns an error wrapped
// with [Permanent], or runs out of attempts or time. The first attempt runs after the backoff's
// first delay, because Add is meant for work that has just failed; each attempt gets a context that
// is canceled by [Queue.Cancel](key) and [Queue.Close] (and expires per [WithAttemptTimeout]).
//
// Add returns nil once key is queued, [ErrAlreadyPending] if key is in the queue already (the
// queued operation stays; none is added), [ErrFull] if the queue holds [WithMaxPending] keys,
// [ErrClosed] after Close, an error wrapping [ErrInvalidOption] if op is nil, and the wheel's error
// ([tock.ErrTooManyPending], [tock.ErrStopped]) if the wheel refuses the timer. A key leaves the
// queue when its retries end, and may then be added again.
func (q *Queue) Add(key string, op func(context.Context) error) error {
	if op == nil {
		return fmt.Errorf("%w: nil operation for key %q", ErrInvalidOption, key)
	}
	q.mu.Lock()
	switch {
	case q.closed:
		q.mu.Unlock()
		return ErrClosed
	case q.entries[key] != nil:
		q.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrAlreadyPending, key)
	case q.cfg.maxPending > 0 && len(q.entries) >= q.cfg.maxPending:
		q.mu.Unlock()
		if q.cfg.onOverflow != nil {
			q.cfg.onOverflow(key)
		}
		return fmt.Errorf("%w (%d keys): %q not added", ErrFull, q.cfg.maxPending, key)
	}
	e := &entry{q: q, key: key, op: op, first: time.Now()}
	e.fire = e.due
	delay := q.cfg.backoff.Delay(1)
	if q.cfg.maxElapsed > 0 {
		delay = min(delay, q.cfg.maxElapsed)
	}
	t, err := q.w.AfterFunc(delay, e.fire)
	if err != nil {
		q.mu.Unlock()
		return fmt.Errorf("retry: scheduling %q: %w", key, err)
	}
	e.timer = t
	q.entries[key] = e
	q.mu.Unlock()
	return nil
}

// Cancel removes key from the queue and reports whether it was there. A waiting key's timer is
// stopped; a running attempt's context is canceled, and its outcome ignored. No hook is called.
// Cancel does not wait for a running attempt to return.
func (q *Queue) Cancel(key string) bool {
	q.mu.Lock()
	e := q.entries[key]
	if e == nil {
		q.mu.Unlock()
		return false
	}
	delete(q.entries, key)
	prev := e.state
	e.state = removed
	t, cancel := e.timer, e.cancel
	q.mu.Unlock()
	switch {
	case prev == waiting:
		t.Stop()
	case prev == running && cancel != nil: // nil while its failure hook runs
		cancel()
	}
	return true
}

// Pending returns the number of keys in the queue: waiting for an attempt, due, or running one.
func (q *Queue) Pending() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.entries)
}

// Close stops the queue: [Queue.Add] returns [ErrClosed] from then on, waiting keys are dropped and
// their timers stopped, and the contexts of running attempts are canceled. Close waits for running
// attempts to return (an operation that ignores its context delays it), then returns, sorted, the
// keys that left the queue without success, so that the caller may keep them for later: a key whose
// running attempt succeeded is not among them. No hook is called for them. A second Close returns
// nil. Close stops the queue's wheel if New made it, and never a wheel given with [WithWheel].
func (q *Queue) Close() []string {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		q.wg.Wait()
		return nil
	}
	q.closed = true
	var keys []string
	var timers []tock.Timer
	for key, e := range q.entries {
		if e.state == running {
			continue // the worker decides, in finish
		}
		keys = append(keys, key)
		if e.state == waiting {
			timers = append(timers, e.timer)
		}
		e.state = removed
		delete(q.entries, key)
	}
	clear(q.ready)
	q.ready = nil
	q.mu.Unlock()

	for _, t := range timers {
		t.Stop()
	}
	q.cancel()
	q.wg.Wait()
	if q.ownWheel {
		q.w.Stop()
	}

	q.mu.Lock()
	keys = append(keys, q.leftover...)
	q.leftover = nil
	q.mu.Unlock()
	slices.Sort(keys)
	return keys
}

// due is the wheel callback of a waiting entry: it queues the entry for a worker, starting one if
// fewer than the bound are running. It only takes a lock and perhaps starts a goroutine, so the
// wheel is never held up.
func (e *entry) due() {
	q := e.q
	q.mu.Lock()
	if e.state != waiting {
		q.mu.Unlock()
		return // canceled or closed while the timer fired
	}
	e.state = ready
	q.ready = append(q.ready, e)
	start := q.workers < q.cfg.workers
	if start {
		q.workers++
		q.wg.Add(1)
	}
	q.mu.Unlock()
	if start {
		go q.work()
	}
}

// work runs due attempts until none is left, then exits.
func (q *Queue) work() {
	defer q.wg.Done()
	for {
		q.mu.Lock()
		var e *entry
		for len(q.ready) > 0 && e == nil {
			e = q.ready[0]
			q.ready[0] = nil
			q.ready = q.ready[1:]
			if e.state != ready {
				e = nil // canceled while due
			}
		}
		if e == nil {
			q.workers--
			q.mu.Unlock()
			return
		}
		e.state = running
		e.attempts++
		ctx, cancel := q.attemptContext()
		e.cancel = cancel
		q.mu.Unlock()

		err := q.run(ctx, e.op)
		cancel()
		q.finish(e, err)
	}
}

// attemptContext returns the context for an attempt.
func (q *Queue) attemptContext() (context.Context, context.CancelFunc) {
	if q.cfg.attemptTimeout > 0 {
		return q.w.WithTimeout(q.ctx, q.cfg.attemptTimeout)
	}
	return context.WithCancel(q.ctx)
}

// run calls op, turning a panic into an error wrapping ErrPanicked and Permanent, since running the
// same code again is unlikely to help and a worker must not take the process down.
func (q *Queue) run(ctx context.Context, op func(context.Context) error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = Permanent(fmt.Errorf("%w: %v\n%s", ErrPanicked, r, debug.Stack()))
		}
	}()
	return op(ctx)
}

// finish handles the outcome of e's attempt: done on success, else the key is given up, or the
// failure hook is called and then the next attempt scheduled. Calling the hook before scheduling
// keeps the hooks of one key in order; the lock is not held while a hook runs, so the key may be
// canceled or the queue closed meanwhile, which is looked at again afterwards.
func (q *Queue) finish(e *entry, err error) {
	q.mu.Lock()
	e.cancel = nil
	if q.dropLocked(e, err) {
		q.mu.Unlock()
		return
	}
	if err == nil {
		e.state = removed
		delete(q.entries, e.key)
		q.mu.Unlock()
		return
	}
	attempts := e.attempts
	delay, giveUp := q.cfg.next(attempts, attempts+1, err, time.Since(e.first))
	if giveUp == nil && q.cfg.onFailure != nil {
		q.mu.Unlock()
		q.cfg.onFailure(e.key, attempts, err, delay)
		q.mu.Lock()
		if q.dropLocked(e, err) {
			q.mu.Unlock()
			return
		}
	}
	if giveUp == nil {
		t, serr := q.w.AfterFunc(delay, e.fire)
		if serr == nil {
			e.timer = t
			e.state = waiting
			q.mu.Unlock()
			return
		}
		giveUp = fmt.Errorf("%w after %d attempts (the wheel refused the next: %w): %w", ErrGaveUp, attempts, serr, err)
	}
	e.state = removed
	delete(q.entries, e.key)
	q.mu.Unlock()
	if q.cfg.onGiveUp != nil {
		q.cfg.onGiveUp(e.key, attempts, giveUp)
	}
}

// dropLocked reports whether e, whose attempt ended with err, is out of the queue's hands: canceled
// while running, or the queue closed (e then leaves, and joins the keys Close returns if err is
// not nil).
func (q *Queue) dropLocked(e *entry, err error) bool {
	if e.state != running {
		return true
	}
	if q.closed {
		e.state = removed
		delete(q.entries, e.key)
		if err != nil {
			q.leftover = append(q.leftover, e.key)
		}
		return true
	}
	return false
}

// next decides what follows a failed attempt: how long to wait before the next one, or, if retries
// stop, why. attempts counts the attempts made, failures the failures in a row (for the backoff),
// and elapsed the time since retries began.
func (c *config) next(attempts, failures int, err error, elapsed time.Duration) (time.Duration, error) {
	if p, ok := permanent(err); ok {
		return 0, p
	}
	if c.maxAttempts > 0 && attempts >= c.maxAttempts {
		return 0, fmt.Errorf("%w after %d attempts: %w", ErrGaveUp, attempts, err)
	}
	d := max(c.backoff.Delay(failures), 0)
	if c.maxElapsed > 0 {
		left := c.maxElapsed - elapsed
		if left <= 0 {
			return 0, fmt.Errorf("%w after %d attempts in %v: %w", ErrGaveUp, attempts, elapsed, err)
		}
		d = min(d, left)
	}
	return d, nil
}
