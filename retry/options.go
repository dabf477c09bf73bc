package retry

import (
	"fmt"
	"time"

	"github.com/tockwheel/tock"
)

// Defaults for options not given.
const (
	// DefaultWorkers bounds the attempts a [Queue] runs at once when [WithWorkers] is not given.
	DefaultWorkers = 16

	// DefaultInitialDelay and DefaultMaxDelay are the parameters of the default [Backoff],
	// [Exponential](DefaultInitialDelay, DefaultMaxDelay).
	DefaultInitialDelay = 100 * time.Millisecond
	DefaultMaxDelay     = 30 * time.Second
)

// An Option configures a [Queue] ([New]) or a single call ([Do]). Options that make sense for only
// one of them say so and are ignored by the other. A nil Option is ignored, so that options can be
// chosen conditionally.
//
// An invalid value is reported at once: New panics with an error wrapping [ErrInvalidOption] that
// names the option, and Do returns that error before the first attempt.
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

// newConfig applies opts to the defaults and returns the first invalid option's error, if any.
func newConfig(opts []Option) (config, error) {
	c := config{
		backoff: defaultBackoff(),
		workers: DefaultWorkers,
	}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	return c, c.err
}

func defaultBackoff() Backoff { return Exponential(DefaultInitialDelay, DefaultMaxDelay) }

// invalid records the first invalid option, described by format and args.
func (c *config) invalid(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
}

// WithBackoff sets how long to wait between attempts; see [Constant] and [Exponential]. The
// default is Exponential([DefaultInitialDelay], [DefaultMaxDelay]); a nil b means the default. A
// Constant or Exponential made with values they refuse is an invalid option.
func WithBackoff(b Backoff) Option {
	return func(c *config) {
		if b == nil {
			c.backoff = defaultBackoff()
			return
		}
		if v, ok := b.(interface{ validate() string }); ok {
			if problem := v.validate(); problem != "" {
				c.invalid("WithBackoff(%v): %s", b, problem)
				return
			}
		}
		c.backoff = b
	}
}

// WithMaxAttempts stops retrying after n attempts. For a [Queue], n counts the attempts the queue
// makes (not the failure that led to [Queue.Add]); for [Do], all calls of the operation. Zero, the
// default, means no limit; a negative n is invalid.
func WithMaxAttempts(n int) Option {
	return func(c *config) {
		if n < 0 {
			c.invalid("WithMaxAttempts(%d): negative", n)
			return
		}
		c.maxAttempts = n
	}
}

// WithMaxElapsed stops retrying once d has passed since [Queue.Add] (for [Do], since the first
// attempt started): no attempt starts later than that, and a delay that would end past it is
// shortened to end at it, so the last attempt runs at the limit. Zero, the default, means no limit;
// a negative d is invalid.
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
// deadline on the wheel, see [tock.Wheel.WithTimeout]). Zero, the default, means no timeout of its
// own; a negative d is invalid.
func WithAttemptTimeout(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.invalid("WithAttemptTimeout(%v): negative", d)
			return
		}
		c.attemptTimeout = d
	}
}

// WithMaxPending bounds the number of keys a [Queue] holds, waiting or running: [Queue.Add]
// returns [ErrFull] beyond it. Zero, the default, means no bound; a negative n is invalid. Do
// ignores it.
func WithMaxPending(n int) Option {
	return func(c *config) {
		if n < 0 {
			c.invalid("WithMaxPending(%d): negative", n)
			return
		}
		c.maxPending = n
	}
}

// WithWorkers bounds the number of attempts a [Queue] runs at once, each on a goroutine of its own
// that exists only while attempts are due. The default is [DefaultWorkers]; n must be positive. Do
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

// WithWheel sets the wheel on which a [Queue] times its attempts, and on which [Do] waits between
// attempts, so that a program can run all of tock on one wheel. The wheel is never stopped by the
// queue or by Do; once the caller stops it, [Queue.Add] returns an error wrapping [tock.ErrStopped]
// and retries in progress give up with one.
//
// Without it, a Queue makes a wheel of its own, which holds no goroutine while no attempt is
// waiting and which [Queue.Close] stops; Do waits on the Go runtime's timers, since one blocking
// call waits for one timer at a time. A nil w means the same as no WithWheel.
func WithWheel(w *tock.Wheel) Option {
	return func(c *config) { c.wheel = w }
}

// WithOnFailure sets a function called after each failed attempt that will be retried, with the
// key (empty for [Do]), the number of attempts made so far, the attempt's error and the delay
// before the next attempt. A [Queue] calls it on its worker goroutines, concurrently for different
// keys but in order for one key: the next attempt is scheduled when it returns (so it should be
// quick). It may call the queue's methods other than [Queue.Close], which waits for it. A nil f
// means no hook, the default.
func WithOnFailure(f func(key string, attempt int, err error, next time.Duration)) Option {
	return func(c *config) { c.onFailure = f }
}

// WithOnGiveUp sets a function called when retries of a key stop without success for any reason
// other than [Queue.Cancel] or [Queue.Close]: a [Permanent] error (err is the error Permanent
// wrapped), attempts or time ran out or the wheel refused the next attempt (err wraps [ErrGaveUp]
// and the last error), or the operation panicked (err wraps [ErrPanicked]). The key has left the
// queue when it is called, so it may Add the key again. A [Queue] calls it on its worker
// goroutines; [Do] calls it with an empty key before returning the same error. Like
// [WithOnFailure]'s function, it must not call Close. A nil f means no hook, the default.
func WithOnGiveUp(f func(key string, attempts int, err error)) Option {
	return func(c *config) { c.onGiveUp = f }
}

// WithOnOverflow sets a function called with the key when [Queue.Add] refuses it because the
// queue is full (see [WithMaxPending]), for example to count or log what was not retried. It runs
// on the goroutine that called Add, which also gets [ErrFull]. Do ignores it. A nil f means no
// hook, the default.
func WithOnOverflow(f func(key string)) Option {
	return func(c *config) { c.onOverflow = f }
}
