package retry

import (
	"fmt"
	"sync"
	"time"

	"github.com/tockwheel/tock"
)

// Defaults for options not given.
const (
	// DefaultWorkers bounds the attempts a Queue runs at once when WithWorkers is not given.
	DefaultWorkers = 16

	// DefaultInitialDelay and DefaultMaxDelay are the parameters of the default Backoff,
	// Exponential(DefaultInitialDelay, DefaultMaxDelay).
	DefaultInitialDelay = 100 * time.Millisecond
	DefaultMaxDelay     = 30 * time.Second
)

// An Option configures a Queue (New) or a single call (Do). Options that make sense for only one of
// them say so and are ignored by the other. An invalid value is reported by Add and Do as
// ErrInvalidOption.
type Option func(*config)

type config struct {
	backoff        Backoff
	maxAttempts    int
	maxElapsed     time.Duration
	attemptTimeout time.Duration
	maxPending     int
	workers        int
	wheel          *tock.Wheel
	onFailure      func(key string, attempt int, err error, next time.Duration)
	onGiveUp       func(key string, attempts int, err error)
	onOverflow     func(key string)
	err            error // the first invalid option
}

func newConfig(opts []Option) config {
	c := config{
		backoff: Exponential(DefaultInitialDelay, DefaultMaxDelay),
		workers: DefaultWorkers,
	}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	if c.err == nil {
		if v, ok := c.backoff.(interface{ validate() error }); ok {
			c.err = v.validate()
		}
	}
	return c
}

// invalid records the first invalid option.
func (c *config) invalid(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
}

// WithBackoff sets how long to wait between attempts; see Constant and Exponential. The default is
// Exponential(DefaultInitialDelay, DefaultMaxDelay). b must not be nil.
func WithBackoff(b Backoff) Option {
	return func(c *config) {
		if b == nil {
			c.invalid("WithBackoff(nil)")
			return
		}
		c.backoff = b
	}
}

// WithMaxAttempts stops retrying after n attempts. For a Queue, n counts the attempts the queue
// makes (not the failure that led to Add); for Do, all calls of the operation. Zero, the default,
// means no limit; n must not be negative.
func WithMaxAttempts(n int) Option {
	return func(c *config) {
		if n < 0 {
			c.invalid("WithMaxAttempts(%d): negative", n)
			return
		}
		c.maxAttempts = n
	}
}

// WithMaxElapsed stops retrying once d has passed since Add (for Do, since the first attempt
// started): no attempt starts later than that, and a delay that would end past it is shortened to
// end at it, so the last attempt runs at the limit. Zero, the default, means no limit; d must not be
// negative.
func WithMaxElapsed(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.invalid("WithMaxElapsed(%v): negative", d)
			return
		}
		c.maxElapsed = d
	}
}

// WithAttemptTimeout gives each attempt a context that expires d after the attempt starts (a
// deadline on the wheel, see tock.Wheel.WithTimeout). Zero, the default, means no timeout of its
// own; d must not be negative.
func WithAttemptTimeout(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.invalid("WithAttemptTimeout(%v): negative", d)
			return
		}
		c.attemptTimeout = d
	}
}

// WithMaxPending bounds the number of keys a Queue holds, waiting or running: Add returns ErrFull
// beyond it. Zero, the default, means no bound; n must not be negative. Do ignores it.
func WithMaxPending(n int) Option {
	return func(c *config) {
		if n < 0 {
			c.invalid("WithMaxPending(%d): negative", n)
			return
		}
		c.maxPending = n
	}
}

// WithWorkers bounds the number of attempts a Queue runs at once, each on a goroutine of its own
// that exists only while attempts are due. The default is DefaultWorkers; n must be positive. Do
// ignores it.
func WithWorkers(n int) Option {
	return func(c *config) {
		if n <= 0 {
			c.invalid("WithWorkers(%d): want a positive number", n)
			return
		}
		c.workers = n
	}
}

// WithWheel sets the wheel that Do waits on between attempts (New takes its wheel as an argument,
// and uses this one only if that is nil). Without it, Do uses a wheel private to the package, made
// on first use and never stopped. Tests that call Do inside a testing/synctest bubble must pass a
// wheel made in the bubble.
func WithWheel(w *tock.Wheel) Option {
	return func(c *config) { c.wheel = w }
}

// WithOnFailure sets a function called after each failed attempt that will be retried, with the
// key (empty for Do), the number of attempts made so far, the attempt's error and the delay before
// the next attempt. A Queue calls it on its worker goroutines, concurrently for different keys but
// in order for one key: the next attempt is scheduled when it returns (so it should be quick). It
// may call the queue's methods other than Close, which waits for it.
func WithOnFailure(f func(key string, attempt int, err error, next time.Duration)) Option {
	return func(c *config) { c.onFailure = f }
}

// WithOnGiveUp sets a function called when retries of a key stop without success for any reason
// other than Cancel or Close: a Permanent error (err is the error Permanent wrapped), attempts or
// time ran out or the wheel refused the next attempt (err wraps ErrGaveUp and the last error), or
// the operation panicked (err wraps ErrPanicked). The key has left the queue when it is called, so
// it may Add the key again. A Queue calls it on its worker goroutines; Do calls it with an empty
// key before returning the same error. Like WithOnFailure's function, it must not call Close.
func WithOnGiveUp(f func(key string, attempts int, err error)) Option {
	return func(c *config) { c.onGiveUp = f }
}

// WithOnOverflow sets a function called with the key when Add refuses it because the queue is
// full (see WithMaxPending), for example to count or log what was not retried. It runs on the
// goroutine that called Add, which also gets ErrFull. Do ignores it.
func WithOnOverflow(f func(key string)) Option {
	return func(c *config) { c.onOverflow = f }
}

// defaultWheel is the wheel of queues and Do calls not given one: made on first use and never
// stopped, it holds no goroutine while no timer is pending.
var defaultWheel = sync.OnceValue(func() *tock.Wheel { return tock.New() })

// wheelFor returns w, else the configured wheel, else the package's own.
func (c *config) wheelFor(w *tock.Wheel) *tock.Wheel {
	switch {
	case w != nil:
		return w
	case c.wheel != nil:
		return c.wheel
	}
	return defaultWheel()
}
