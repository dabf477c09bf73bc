package redisq

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/tockwheel/tock"
)

// Defaults of the options.
const (
	DefaultPrefix      = "tock"
	DefaultShards      = 16
	DefaultMaxAttempts = 16
	DefaultMaxPayload  = 1 << 20
	DefaultOwnerLease  = 10 * time.Second
	DefaultRecheck     = 30 * time.Second
	DefaultReplicaWait = time.Second
)

// Bounds of the options.
const (
	// MaxPayloadLimit is the largest WithMaxPayload accepted.
	MaxPayloadLimit = 64 << 20
	// MinOwnerLease is the shortest WithOwnerLease accepted.
	MinOwnerLease = 100 * time.Millisecond
	// MinRecheck is the shortest WithRecheck accepted.
	MinRecheck = 100 * time.Millisecond
)

// An Option configures a Queue in Open. A nil Option is ignored.
type Option func(*config)

type config struct {
	prefix       string
	shards       int
	wheel        *tock.Wheel
	logger       *slog.Logger
	maxAttempts  int
	backoffFirst time.Duration
	backoffMax   time.Duration
	maxPayload   int
	deadLetter   string
	ownerLease   time.Duration
	recheck      time.Duration
	replicas     int           // -1: one where the master has replicas
	replicaWait  time.Duration // how long WAIT waits
	err          error         // the first invalid option

	// Internal knobs, for tests.
	grace       time.Duration // how long past the owner's time to tick a process waits for its event
	noCandidacy bool
	// schedStepHook is called by a schedule driver's step once it has read its shard's due
	// schedules (due of them), before it plans them.
	schedStepHook func(shard, due int)
	// rehomeStepHook is called before each script of the upgrade's rehomeFire; an error stops
	// the upgrade with it, as a process that dies there.
	rehomeStepHook func() error
}

func defaultConfig() config {
	return config{
		prefix:       DefaultPrefix,
		shards:       DefaultShards,
		maxAttempts:  DefaultMaxAttempts,
		backoffFirst: time.Second,
		backoffMax:   5 * time.Minute,
		maxPayload:   DefaultMaxPayload,
		ownerLease:   DefaultOwnerLease,
		recheck:      DefaultRecheck,
		replicas:     -1,
		replicaWait:  DefaultReplicaWait,
		grace:        defaultGrace,
	}
}

func (c *config) invalid(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf("%w: "+format, append([]any{ErrInvalidOption}, args...)...)
	}
}

// WithPrefix names the deployment: every key of the queue starts with it (inside the hash tags of
// the shards), so that several deployments, or parallel tests, can share one Redis. The default is
// DefaultPrefix. Open refuses a prefix that is empty, longer than MaxPrefix, or has characters
// other than printable ASCII, or braces.
func WithPrefix(p string) Option {
	return func(c *config) {
		if err := validPrefix(p); err != nil {
			c.invalid("WithPrefix(%q): %v", p, err)
			return
		}
		c.prefix = p
	}
}

// WithShards sets the number of shards of a deployment that Open creates (DefaultShards by
// default). It is fixed then: Open of an existing deployment with another count fails with
// ErrMismatch, and without WithShards takes the deployment's. More shards spread a Cluster's load
// more evenly (a shard is one slot, on one master) at the cost of a pub/sub connection each per
// process. Open refuses n outside [1, MaxShards].
func WithShards(n int) Option {
	return func(c *config) {
		if n < 1 || n > MaxShards {
			c.invalid("WithShards(%d): want 1 to %d", n, MaxShards)
			return
		}
		c.shards = n
	}
}

// WithWheel makes the Queue keep its timers on w, a wheel shared with the rest of the program; the
// Queue never stops it. A nil w means a wheel of the Queue's own, the default, stopped by Close.
func WithWheel(w *tock.Wheel) Option {
	return func(c *config) { c.wheel = w }
}

// WithLogger sets where the Queue reports background errors (housekeeping, subscriptions) and
// warnings about its configuration. A nil logger means slog.Default(), the default.
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// WithMaxAttempts sets how many deliveries of a message may fail (lease expired or nacked) before
// it moves to the dead-letter topic (DefaultMaxAttempts by default). n = 0 means never: messages
// are retried forever. Open refuses a negative n.
func WithMaxAttempts(n int) Option {
	return func(c *config) {
		if n < 0 {
			c.invalid("WithMaxAttempts(%d): negative", n)
			return
		}
		c.maxAttempts = n
	}
}

// WithBackoff sets the delay before a message whose lease ran out is due again: first after the
// first failure, doubling after each further one, up to max (defaults 1s and 5m), rounded up to
// milliseconds. A dead letter that fails on its dead-letter topic waits max. Nack takes its delay
// from its caller instead. Open refuses a first below a millisecond or a max below first.
func WithBackoff(first, max time.Duration) Option {
	return func(c *config) {
		if first < time.Millisecond || max < first {
			c.invalid("WithBackoff(%v, %v): want 1ms <= first <= max", first, max)
			return
		}
		c.backoffFirst, c.backoffMax = first, max
	}
}

// WithMaxPayload sets the largest payload Put accepts, in bytes (DefaultMaxPayload by default); a
// larger one is refused with queue.ErrTooLarge. Open refuses n outside [0, MaxPayloadLimit].
func WithMaxPayload(n int) Option {
	return func(c *config) {
		if n < 0 || n > MaxPayloadLimit {
			c.invalid("WithMaxPayload(%d): want 0 to %d", n, MaxPayloadLimit)
			return
		}
		c.maxPayload = n
	}
}

// WithDeadLetterTopic sends every dead letter to topic. By default, and with an empty topic, a
// message of topic T goes to T followed by queue.DeadLetterSuffix. A message that exhausts its
// attempts on its dead-letter topic stays there, retried after the longest backoff. Open refuses a
// topic longer than MaxTopic.
func WithDeadLetterTopic(topic string) Option {
	return func(c *config) {
		if len(topic) > MaxTopic {
			c.invalid("WithDeadLetterTopic: %d bytes, over %d", len(topic), MaxTopic)
			return
		}
		c.deadLetter = topic
	}
}

// WithOwnerLease sets the lease under which a process owns a shard's housekeeping (DefaultOwnerLease
// by default): redislock's watchdog renews it every third of d while the shard has work, and a
// process that dies leaves it to another after at most d (meanwhile the others do its work in its
// place, on time). Open refuses d below MinOwnerLease.
func WithOwnerLease(d time.Duration) Option {
	return func(c *config) {
		if d < MinOwnerLease {
			c.invalid("WithOwnerLease(%v): below %v", d, MinOwnerLease)
			return
		}
		c.ownerLease = d
	}
}

// WithRecheck sets how often each pub/sub subscription is pinged (DefaultRecheck by default): the
// bound on how late an announcement lost without its connection dropping can make a message. A
// dropped connection is noticed at once, and the shard re-read. Open refuses d below MinRecheck.
func WithRecheck(d time.Duration) Option {
	return func(c *config) {
		if d < MinRecheck {
			c.invalid("WithRecheck(%v): below %v", d, MinRecheck)
			return
		}
		c.recheck = d
	}
}

// WithReplicaWait makes every grouped write (Put, PutBatch, Ack, Nack, Cancel) wait until n replicas
// of its master have it (WAIT n), for at most timeout; a write not confirmed in time fails with an
// error matching queue.ErrUnavailable. n = 0 never waits. By default the Queue waits, for up to
// DefaultReplicaWait, for one replica on masters that have one, and does not wait on masters
// without. Open refuses a negative n, or a timeout below a millisecond when n > 0.
func WithReplicaWait(n int, timeout time.Duration) Option {
	return func(c *config) {
		if n < 0 || (n > 0 && timeout < time.Millisecond) {
			c.invalid("WithReplicaWait(%d, %v): want n >= 0 and a timeout of at least 1ms", n, timeout)
			return
		}
		c.replicas, c.replicaWait = n, timeout
	}
}

// defaultGrace is how long past the time the owner of a shard should have ticked (its lead ahead
// of a second, or a lease's deadline) the other processes wait for its event before one acts in
// its place. With the offsets of the processes (up to half of it) it stays under the lead
// (leadBase, 250 ms), so that a second whose owner died is still promoted before it starts.
const defaultGrace = 100 * time.Millisecond

// withGrace sets how long past the owner's time to tick a process waits for the owner's event
// before it acts in the owner's place (defaultGrace by default). Tests change it.
func withGrace(d time.Duration) Option {
	return func(c *config) { c.grace = d }
}

// withRehomeStepHook makes the upgrade from layout version 2 or 3 call f before each script of
// rehomeFire, and stop with the error f returns.
func withRehomeStepHook(f func() error) Option {
	return func(c *config) { c.rehomeStepHook = f }
}

// withNoCandidacy makes the Queue take no free shard ahead of its time, only when its owner is
// late, until a test clears testHookNoCandidacy.
func withNoCandidacy() Option {
	return func(c *config) { c.noCandidacy = true }
}

// withSchedStepHook makes every schedule driver's step call f with its shard and the number of
// due schedules it read, once it has read them and before it plans them: a test holds a step
// there.
func withSchedStepHook(f func(shard, due int)) Option {
	return func(c *config) { c.schedStepHook = f }
}
