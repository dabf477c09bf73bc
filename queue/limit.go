package queue

import (
	"context"
	"fmt"
	"math"
)

// A Limiter is an [Engine] whose deliveries an operator can limit per topic: a rate (at most so
// many deliveries a second, with a burst) and a concurrency (at most so many messages leased at
// once). The engine enforces a topic's limit for every consumer of every process that shares its
// storage, whatever their number: a Receive on a topic at its limit waits, as on an empty topic,
// until a permit comes, without polling (the next permit is a timer, or the end of a lease). It is
// optional, as [Admin] is; the server's limit routes, the CLI and the status page use it.
//
// A limit is durable as a Put is, and lasts until it is removed, across restarts of the engine
// (each engine's documentation says where it keeps it). Leases taken before a limit was set count
// against its concurrency. Redeliveries count as deliveries.
type Limiter interface {
	Engine

	// SetLimit sets the limit of topic's deliveries, replacing any it had; the zero Limit removes
	// it. A limit [Limit.Check] refuses is refused with ErrInvalid, an empty topic too. Waiting
	// Receive calls see the new limit at once.
	SetLimit(ctx context.Context, topic string, l Limit) error

	// Limits returns the limit of every topic that has one, in the order of their names.
	Limits(ctx context.Context) ([]TopicLimit, error)
}

// A Limit bounds a topic's deliveries. Its zero value is no limit.
type Limit struct {
	// Rate is the most deliveries a second, on average; 0 sets no rate. In any span of T seconds
	// the topic has at most Rate·T + Burst deliveries.
	Rate float64
	// Burst is how many deliveries the rate lets through at once after a quiet time, from 1 to
	// MaxBurst; 0 with a Rate means a tenth of a second of the rate (at least 1). It is 0 when Rate
	// is.
	Burst int
	// Concurrency is the most messages of the topic leased at once, from 1 to MaxConcurrency; 0
	// sets no bound.
	Concurrency int
}

// A TopicLimit is a topic and its limit, as [Limiter.Limits] lists them.
type TopicLimit struct {
	Topic string
	Limit
}

// Bounds of a [Limit].
const (
	MaxRate        = 1e6
	MaxBurst       = 1 << 20
	MaxConcurrency = 1 << 20
)

// IsZero reports whether l is no limit.
func (l Limit) IsZero() bool { return l == Limit{} }

// Check returns l with its default burst, or an error matching ErrInvalid that names what it
// cannot take: a Rate not from 0 to MaxRate (or not a number), a Burst without a Rate or over
// MaxBurst, a Concurrency not from 0 to MaxConcurrency. Engines and servers check a limit with it,
// so that every one refuses the same.
func (l Limit) Check() (Limit, error) {
	switch {
	case math.IsNaN(l.Rate) || l.Rate < 0 || l.Rate > MaxRate:
		return l, fmt.Errorf("limit rate %v: want 0 to %v deliveries a second: %w", l.Rate, float64(MaxRate), ErrInvalid)
	case l.Burst < 0 || l.Burst > MaxBurst:
		return l, fmt.Errorf("limit burst %d: want 0 to %d: %w", l.Burst, MaxBurst, ErrInvalid)
	case l.Burst > 0 && l.Rate == 0:
		return l, fmt.Errorf("limit burst %d without a rate: %w", l.Burst, ErrInvalid)
	case l.Concurrency < 0 || l.Concurrency > MaxConcurrency:
		return l, fmt.Errorf("limit concurrency %d: want 0 to %d: %w", l.Concurrency, MaxConcurrency, ErrInvalid)
	}
	if l.Rate > 0 && l.Burst == 0 {
		l.Burst = max(1, int(math.Ceil(l.Rate/10)))
	}
	return l, nil
}
