package tock

import (
	"fmt"
	"runtime"
	"time"
)

// DefaultTick is the tick used when [WithTick] is not given: timers fire at most this much after
// their deadline (plus the time it takes the Go scheduler to run the driver).
const DefaultTick = time.Millisecond

// MinTick is the finest tick [WithTick] accepts.
const MinTick = time.Microsecond

// DefaultPoolSize is the bound on callback goroutines of the default executor, [WithPoolExecutor].
const DefaultPoolSize = 256

// An Option configures a [Wheel] in [New]. A nil Option is ignored, so that options can be chosen
// conditionally.
type Option func(*config)

type executorKind int

const (
	executorPool executorKind = iota
	executorInline
	executorGoroutine
)

type config struct {
	tick       time.Duration
	maxPending int
	shards     int
	executor   executorKind
	poolSize   int
	onPanic    func(recovered any)
	bad        string // the first invalid option, which New panics with
}

func defaultConfig() config {
	return config{
		tick:     DefaultTick,
		shards:   runtime.GOMAXPROCS(0),
		executor: executorPool,
		poolSize: DefaultPoolSize,
	}
}

// WithTick sets the wheel's resolution: every deadline is rounded up to a multiple of d, so a
// timer fires at most d late (plus scheduling noise) and never early. A smaller tick means more
// precise firing and more driver wake-ups when timers are dense. The default is [DefaultTick].
// [New] panics if d is less than [MinTick], as [time.NewTicker] does for a non-positive duration.
func WithTick(d time.Duration) Option {
	return func(c *config) {
		if d < MinTick {
			c.invalid("WithTick(%v): below the minimum tick of %v", d, MinTick)
			return
		}
		c.tick = d
	}
}

// WithMaxPending bounds the number of pending timers: scheduling beyond n returns
// [ErrTooManyPending]. n <= 0 means no bound, the default. The bound costs one atomic counter
// shared by all goroutines, so leave it unset where contention matters more than the bound.
func WithMaxPending(n int) Option {
	return func(c *config) { c.maxPending = n }
}

// WithShards sets how many independent shards, each with its own lock and driver goroutine, the
// wheel is split into. The default is [runtime.GOMAXPROCS](0), which lets schedule and cancel scale
// with cores. [New] panics if n < 1.
func WithShards(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.invalid("WithShards(%d): need at least 1 shard", n)
			return
		}
		c.shards = n
	}
}

// WithPoolExecutor runs callbacks on a pool of at most n goroutines. This is the default, with n =
// [DefaultPoolSize]. The driver hands each tick's due callbacks to the pool as one batch and starts
// a worker for it; workers share batches, taking one callback at a time, and exit when none is
// left, so an idle wheel holds no goroutines and a burst of due timers runs on a few goroutines. A
// callback that blocks holds only its own worker: up to n callbacks can block at once before others
// are held up. [New] panics if n < 1.
func WithPoolExecutor(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.invalid("WithPoolExecutor(%d): need at least 1 goroutine", n)
			return
		}
		c.executor, c.poolSize = executorPool, n
	}
}

// WithInlineExecutor runs callbacks on the driver goroutine of the shard that fired them. It is the
// fastest executor, but a callback that blocks delays every later timer of that shard; use it only
// for callbacks that return at once, such as closing a channel or cancelling a context.
func WithInlineExecutor() Option {
	return func(c *config) { c.executor = executorInline }
}

// WithGoroutineExecutor runs each callback in a goroutine of its own, as [time.AfterFunc] does. No
// callback can delay another, at the cost of starting a goroutine per fire.
func WithGoroutineExecutor() Option {
	return func(c *config) { c.executor = executorGoroutine }
}

// WithPanicHandler sets the function told about a callback that panicked, with the value it
// panicked with. The wheel recovers the panic and goes on. The default logs the panic and its stack
// with [log/slog] at error level. h runs on the goroutine that ran the callback. A nil h means the
// default.
func WithPanicHandler(h func(recovered any)) Option {
	return func(c *config) { c.onPanic = h }
}

// invalid records the first invalid option, described by format and args; New panics with it.
func (c *config) invalid(format string, args ...any) {
	if c.bad == "" {
		c.bad = "tock: " + fmt.Sprintf(format, args...)
	}
}
