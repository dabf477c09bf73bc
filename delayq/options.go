package delayq

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/delayq/internal/format"
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
const MaxPayloadLimit = format.MaxPayload

// An Option configures a Queue in Open. A nil Option is ignored. Open reports an option out of
// its range as an error matching [ErrInvalid] that names the option.
type Option func(*config)

type config struct {
	noSync       bool
	slot         time.Duration
	slotSet      bool // WithSlot was given: a queue created with another slot is refused
	horizon      time.Duration
	horizonSet   bool
	preload      time.Duration
	maxAttempts  int
	deadLetter   string
	backoffFirst time.Duration
	backoffMax   time.Duration
	checkpoint   time.Duration
	segmentSize  int64
	maxPayload   int
	logger       *slog.Logger
	wheel        *tock.Wheel // nil: a wheel of the queue's own
	compactLive  float64     // see WithCompaction
	compactRate  int64
	beforeWrite  func()    // a test's hook into the log writer
	beforeLoad   func()    // a test's hook into the loader, called before it loads a slot
	noLoader     bool      // a test's switch: no loader goroutine; the test loads slots (Queue.load)
	files        wal.Files // a test's full or failing disk; nil: the operating system's files
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

// WithNoSync makes writes skip fdatasync: Put, Ack, Nack and Cancel return once their record is
// handed to the log writer, before it is written. A process crash or power loss can then lose the
// last moments of puts and acks (a lost ack means a redelivery). The log is still checksummed and
// recovery still cuts a torn write. By default every write is synced before the call returns.
func WithNoSync() Option {
	return func(c *config) { c.noSync = true }
}

// WithSlot sets the granularity of the disk wheel (default 1s). Delivery precision does not depend
// on it: messages are moved to the in-memory wheel before their slot is due. Smaller slots mean
// more, smaller loads. It is fixed when the directory is created: Open of an existing queue
// refuses a WithSlot that differs from the slot it was created with (and without WithSlot uses
// that one). d must be at least a millisecond.
func WithSlot(d time.Duration) Option {
	return func(c *config) { c.slot, c.slotSet = d, true }
}

// WithHorizon sets how far ahead the disk wheel reaches (default 24h). Messages due later are
// written again (rolled) each time their slot comes round, once per horizon of delay. Memory is
// about 40 bytes per slot (horizon / slot), at most 2^24 slots. Fixed when the directory is
// created, like WithSlot. d must be at least one slot.
func WithHorizon(d time.Duration) Option {
	return func(c *config) { c.horizon, c.horizonSet = d, true }
}

// WithPreload sets how long before its slot starts a disk slot is read into memory (default: two
// slots). Larger values absorb bigger bursts on time at the cost of holding them in memory sooner.
// A slot holding many messages is read earlier still, by 20µs a message (2 s for 100,000), up to
// 30 s: the time reading them may take on a busy machine. d must not be negative; 0 means the
// default.
func WithPreload(d time.Duration) Option {
	return func(c *config) { c.preload = d }
}

// WithMaxAttempts sets how many deliveries of a message may fail (lease expired or nacked) before
// it moves to the dead-letter topic (default 16). n <= 0 means never: messages are retried forever.
func WithMaxAttempts(n int) Option {
	return func(c *config) { c.maxAttempts = n }
}

// WithDeadLetterTopic sends every dead letter to topic. By default (and with "") a message of
// topic T goes to T + ".dead". A message that exhausts its attempts on its dead-letter topic stays
// there and is retried with the longest backoff; it is never dropped. The topic must be at most
// 65535 bytes.
func WithDeadLetterTopic(topic string) Option {
	return func(c *config) { c.deadLetter = topic }
}

// WithBackoff sets the delay before a message whose lease expired is due again: first after the
// first failure, doubling after each further failure, capped at max (defaults 1s and 5m). Nack
// takes its delay from its caller instead. first must be positive and max at least first.
func WithBackoff(first, max time.Duration) Option {
	return func(c *config) { c.backoffFirst, c.backoffMax = first, max }
}

// WithCheckpointInterval sets how often the wheel's state is checkpointed (default 2s). Recovery
// replays the log written since the last checkpoint, so a shorter interval makes reopening after a
// crash faster at the cost of more writes. d must be positive.
func WithCheckpointInterval(d time.Duration) Option {
	return func(c *config) { c.checkpoint = d }
}

// WithSegmentSize sets the size in bytes at which the log starts a new segment file (default 64
// MiB), from 4 KiB to 2 GiB. Segments are the unit of deletion: smaller ones return disk space
// sooner.
func WithSegmentSize(n int64) Option {
	return func(c *config) { c.segmentSize = n }
}

// WithMaxPayload sets the largest payload in bytes Put accepts (default 1 MiB), at most
// [MaxPayloadLimit].
func WithMaxPayload(n int) Option {
	return func(c *config) { c.maxPayload = n }
}

// WithLogger sets where the queue reports repairs, damage and background errors. WithLogger(nil)
// means [slog.Default], the default.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// WithWheel makes the queue keep its in-memory timers (messages of the near window, leases) on w,
// so that a program can run all of tock on one wheel. Delivery is as precise as w's tick. A wheel
// given is never stopped by the queue; if its owner stops it first, the queue's calls fail with an
// error matching [tock.ErrStopped]. WithWheel(nil) means a wheel of the queue's own, the default,
// stopped by Close.
func WithWheel(w *tock.Wheel) Option {
	return func(c *config) { c.wheel = w }
}

// optionError is an option out of its range. It matches ErrInvalid.
type optionError struct{ option, problem string }

func (e *optionError) Error() string        { return "delayq: " + e.option + ": " + e.problem }
func (e *optionError) Is(target error) bool { return target == ErrInvalid }

func badOption(problem, format string, args ...any) error {
	return &optionError{option: fmt.Sprintf(format, args...), problem: problem}
}

func (c *config) validate() error {
	switch {
	case c.slot < time.Millisecond:
		return badOption("below 1ms", "WithSlot(%v)", c.slot)
	case c.horizon < c.slot:
		return badOption(fmt.Sprintf("shorter than the slot, %v", c.slot), "WithHorizon(%v)", c.horizon)
	case c.horizon/c.slot > 1<<24:
		return badOption(fmt.Sprintf("%d slots of %v; at most %d", c.horizon/c.slot, c.slot, 1<<24), "WithHorizon(%v)", c.horizon)
	case c.preload < 0:
		return badOption("negative", "WithPreload(%v)", c.preload)
	case c.backoffFirst <= 0 || c.backoffMax < c.backoffFirst:
		return badOption("first must be positive and max at least first", "WithBackoff(%v, %v)", c.backoffFirst, c.backoffMax)
	case c.checkpoint <= 0:
		return badOption("not positive", "WithCheckpointInterval(%v)", c.checkpoint)
	case c.segmentSize < 1<<12 || c.segmentSize > 1<<31:
		return badOption("outside [4 KiB, 2 GiB]", "WithSegmentSize(%d)", c.segmentSize)
	case c.maxPayload < 0 || c.maxPayload > MaxPayloadLimit:
		return badOption(fmt.Sprintf("outside [0, %d]", MaxPayloadLimit), "WithMaxPayload(%d)", c.maxPayload)
	case len(c.deadLetter) > format.MaxName:
		return badOption(fmt.Sprintf("%d bytes; at most %d", len(c.deadLetter), format.MaxName), "WithDeadLetterTopic")
	case c.compactLive != c.compactLive || c.compactLive > 1:
		return badOption("live fraction must be at most 1", "WithCompaction(%v, %d)", c.compactLive, c.compactRate)
	}
	if c.logger == nil {
		c.logger = slog.Default()
	}
	return nil
}

// checkStored reports a WithSlot or WithHorizon that differs from what the queue in dir was
// created with, slotNs and slots; without them, the stored ones are used.
func (c *config) checkStored(dir string, slotNs int64, slots int) error {
	slot := time.Duration(slotNs)
	if c.slotSet && c.slot != slot {
		return badOption(fmt.Sprintf("the queue in %s was created with a slot of %v; open it with that, or without WithSlot", dir, slot), "WithSlot(%v)", c.slot)
	}
	if c.horizonSet && int(c.horizon/slot) != slots {
		return badOption(fmt.Sprintf("the queue in %s was created with a horizon of %v (%d slots of %v); open it with that, or without WithHorizon",
			dir, slot*time.Duration(slots), slots, slot), "WithHorizon(%v)", c.horizon)
	}
	c.slot, c.horizon = slot, slot*time.Duration(slots)
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
