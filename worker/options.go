package worker

import (
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel/trace"

	"github.com/tockwheel/tock"
)

// An Option configures a Worker. A nil Option is ignored.
type Option func(*config)

type config struct {
	concurrency int
	maxReceive  int
	visibility  time.Duration
	shutdown    time.Duration
	backoff     func(attempt int) time.Duration
	reg         prometheus.Registerer
	logger      *slog.Logger
	wheel       *tock.Wheel
	tracer      trace.TracerProvider
}

func defaultConfig() config {
	return config{
		concurrency: 16,
		maxReceive:  100,
		visibility:  30 * time.Second,
		shutdown:    30 * time.Second,
		backoff:     DefaultBackoff,
		logger:      slog.Default(),
	}
}

// Bounds the options enforce.
const (
	// MinVisibility is the shortest lease WithVisibility takes: extensions come every third of it.
	MinVisibility = 30 * time.Millisecond
	// MaxConcurrency is the most handlers WithConcurrency lets run at once per topic.
	MaxConcurrency = 1 << 20
)

// WithConcurrency bounds the handlers that run at once, per topic: n from 1 to MaxConcurrency
// (default 16). Receives ask for as many messages as there are free places, up to
// WithMaxReceive.
func WithConcurrency(n int) Option { return func(c *config) { c.concurrency = n } }

// WithMaxReceive bounds the messages one receive asks for: n from 1 (default 100).
func WithMaxReceive(n int) Option { return func(c *config) { c.maxReceive = n } }

// WithVisibility sets the lease of each message, and of each extension of it (default 30s, at
// least MinVisibility): extensions come every third of it, so a Worker that stops (crashes, or
// is cut off from the engine) holds its messages for at most about that long.
func WithVisibility(d time.Duration) Option { return func(c *config) { c.visibility = d } }

// WithShutdownTimeout sets how long Run lets running handlers finish once its context ends
// (default 30s; 0 hands their messages back at once). It must not be negative.
func WithShutdownTimeout(d time.Duration) Option { return func(c *config) { c.shutdown = d } }

// WithBackoff sets the delay before a failed message is due again, by the attempt that failed (1
// the first time); it is called concurrently. A nil f means DefaultBackoff, the default.
func WithBackoff(f func(attempt int) time.Duration) Option {
	return func(c *config) { c.backoff = f }
}

// WithRegisterer exports the Worker's metrics (see the package doc) on r. [New] panics when r
// refuses them (another Worker registered them there: give each Worker a registerer of its own,
// such as prometheus.WrapRegistererWith with a label). A nil r, the default, exports none.
func WithRegisterer(r prometheus.Registerer) Option { return func(c *config) { c.reg = r } }

// WithLogger logs handlers' panics and the engine's failures to l. A nil l means slog.Default,
// the default.
func WithLogger(l *slog.Logger) Option { return func(c *config) { c.logger = l } }

// WithWheel times the lease extensions on w, which the Worker never stops. A nil w, the default,
// means a wheel of the Worker's own, stopped when Run returns.
func WithWheel(w *tock.Wheel) Option { return func(c *config) { c.wheel = w } }

// WithTracerProvider makes the spans of the handlers with tp (see the package doc's Traces). A nil
// tp, the default, means OpenTelemetry's global provider (otel.GetTracerProvider), which makes
// none until the program sets one.
func WithTracerProvider(tp trace.TracerProvider) Option { return func(c *config) { c.tracer = tp } }

// DefaultBackoff is the backoff of a failed attempt: 1s after the first, doubling up to an hour,
// each drawn at random between half and all of it (full jitter in its upper half), so that
// messages that failed together are not tried again together.
func DefaultBackoff(attempt int) time.Duration {
	d := time.Second
	for i := 1; i < attempt && d < time.Hour; i++ {
		d *= 2
	}
	d = min(d, time.Hour)
	return d/2 + rand.N(d/2+1)
}

func (c *config) validate() error {
	switch {
	case c.concurrency < 1 || c.concurrency > MaxConcurrency:
		return fmt.Errorf("worker: WithConcurrency(%d): want 1 to %d", c.concurrency, MaxConcurrency)
	case c.maxReceive < 1:
		return fmt.Errorf("worker: WithMaxReceive(%d): want at least 1", c.maxReceive)
	case c.visibility < MinVisibility:
		return fmt.Errorf("worker: WithVisibility(%v): want at least %v", c.visibility, MinVisibility)
	case c.shutdown < 0:
		return fmt.Errorf("worker: WithShutdownTimeout(%v): must not be negative", c.shutdown)
	}
	if c.backoff == nil {
		c.backoff = DefaultBackoff
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return nil
}
