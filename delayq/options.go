package delayq

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// Defaults of the options.
const (
	DefaultSlot               = time.Second
	DefaultHorizon            = 24 * time.Hour
	DefaultMaxAttempts        = 16
	DefaultCheckpointInterval = 2 * time.Second
	DefaultSegmentSize        = 64 << 20
	DefaultMaxPayload         = 1 << 20
	DefaultDeadLetterSuffix   = ".dead"
)

// MaxPayloadLimit is the largest payload any queue accepts: the most WithMaxPayload may allow.
const MaxPayloadLimit = wal.MaxPayload

// An Option configures a Queue in Open.
type Option func(*config)

type config struct {
	noSync       bool
	slot         time.Duration
	horizon      time.Duration
	preload      time.Duration
	maxAttempts  int
	deadLetter   string
	backoffFirst time.Duration
	backoffMax   time.Duration
	checkpoint   time.Duration
	segmentSize  int64
	maxPayload   int
	logger       *slog.Logger
	compactLive  float64 // see WithCompaction
	compactRate  int64
}

func defaultConfig() config {
	return config{
		slot:         DefaultSlot,
		horizon:      DefaultHorizon,
		maxAttempts:  DefaultMaxAttempts,
		backoffFirst: time.Second,
		backoffMax:   5 * time.Minute,
		checkpoint:   DefaultCheckpointInterval,
		segmentSize:  DefaultSegmentSize,
		maxPayload:   DefaultMaxPayload,
		compactLive:  DefaultCompactLive,
		compactRate:  DefaultCompactRate,
	}
}

// NoSync makes writes skip fdatasync: Put, Ack, Nack and Cancel return once their record is handed
// to the log writer, before it is written. A process crash or power loss can then lose the last
// moments of puts and acks (a lost ack means a redelivery). The log is still checksummed and
// recovery still truncates a torn tail.
func NoSync() Option {
	return func(c *config) { c.noSync = true }
}

// WithSlot sets the granularity of the disk wheel (default 1s). Delivery precision does not depend
// on it: messages are moved to the in-memory wheel before their slot is due. Smaller slots mean
// more, smaller loads. It is fixed when the directory is created; Open ignores it for an existing
// queue. d must be at least a millisecond.
func WithSlot(d time.Duration) Option {
	return func(c *config) { c.slot = d }
}

// WithHorizon sets how far ahead the disk wheel reaches (default 24h). Messages due later are
// written again (rolled) each time their slot comes round, once per horizon of delay. Memory is
// 24 bytes per slot (horizon / slot). Fixed when the directory is created, like WithSlot.
func WithHorizon(d time.Duration) Option {
	return func(c *config) { c.horizon = d }
}

// WithPreload sets how long before its slot starts a disk slot is read into memory (default: two
// slots). Larger values absorb bigger bursts on time at the cost of holding them in memory sooner.
func WithPreload(d time.Duration) Option {
	return func(c *config) { c.preload = d }
}

// WithMaxAttempts sets how many deliveries of a message may fail (lease expired or nacked) before
// it moves to the dead-letter topic (default 16). n <= 0 means never: messages are retried forever.
func WithMaxAttempts(n int) Option {
	return func(c *config) { c.maxAttempts = n }
}

// WithDeadLetterTopic sends every dead letter to topic. By default a message of topic T goes to
// T + ".dead". A message that exhausts its attempts on its dead-letter topic stays there and is
// retried with the longest backoff; it is never dropped.
func WithDeadLetterTopic(topic string) Option {
	return func(c *config) { c.deadLetter = topic }
}

// WithBackoff sets the delay before a message whose lease expired is due again: first after the
// first failure, doubling after each further failure, capped at max (defaults 1s and 5m). Nack
// takes its delay from its caller instead.
func WithBackoff(first, max time.Duration) Option {
	return func(c *config) { c.backoffFirst, c.backoffMax = first, max }
}

// WithCheckpointInterval sets how often the wheel's state is checkpointed (default 2s). Recovery
// replays the log written since the last checkpoint, so a shorter interval makes reopening after a
// crash faster at the cost of more writes.
func WithCheckpointInterval(d time.Duration) Option {
	return func(c *config) { c.checkpoint = d }
}

// WithSegmentSize sets the size at which the log starts a new segment file (default 64 MiB).
// Segments are the unit of deletion: smaller ones return disk space sooner.
func WithSegmentSize(n int64) Option {
	return func(c *config) { c.segmentSize = n }
}

// WithMaxPayload sets the largest payload Put accepts (default 1 MiB, at most 16 MiB).
func WithMaxPayload(n int) Option {
	return func(c *config) { c.maxPayload = n }
}

// WithLogger sets where the queue reports repairs and background errors (default slog.Default()).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

func (c *config) validate() error {
	switch {
	case c.slot < time.Millisecond:
		return fmt.Errorf("%w: slot %v under 1ms", ErrInvalid, c.slot)
	case c.horizon < c.slot:
		return fmt.Errorf("%w: horizon %v shorter than a slot", ErrInvalid, c.horizon)
	case c.horizon/c.slot > 1<<24:
		return fmt.Errorf("%w: horizon of %d slots; at most %d", ErrInvalid, c.horizon/c.slot, 1<<24)
	case c.preload < 0, c.backoffFirst <= 0, c.backoffMax < c.backoffFirst:
		return fmt.Errorf("%w: negative preload or bad backoff", ErrInvalid)
	case c.checkpoint <= 0:
		return fmt.Errorf("%w: checkpoint interval %v", ErrInvalid, c.checkpoint)
	case c.segmentSize < 1<<12 || c.segmentSize > 1<<31:
		return fmt.Errorf("%w: segment size %d outside [4KiB, 2GiB]", ErrInvalid, c.segmentSize)
	case c.maxPayload < 0 || c.maxPayload > MaxPayloadLimit:
		return fmt.Errorf("%w: max payload %d outside [0, 16MiB]", ErrInvalid, c.maxPayload)
	case len(c.deadLetter) > wal.MaxName:
		return fmt.Errorf("%w: dead-letter topic of %d bytes", ErrInvalid, len(c.deadLetter))
	}
	if c.preload == 0 {
		c.preload = 2 * c.slot
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return nil
}

// backoff returns the delay after the attempt-th failed delivery (attempt >= 1).
func (c *config) backoff(attempt uint32) time.Duration {
	d := c.backoffFirst
	for i := uint32(1); i < attempt && d < c.backoffMax; i++ {
		d *= 2
	}
	return min(d, c.backoffMax)
}

// deadLetterTopic returns where a message of topic goes when it exhausts its attempts.
func (c *config) deadLetterTopic(topic string) string {
	if c.deadLetter != "" {
		return c.deadLetter
	}
	return topic + DefaultDeadLetterSuffix
}
