package redislock

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/internal/rediskit"
)

// Key layout; see the package doc. Frozen: other clients rely on it.
const (
	keyPrefix     = "tock:lock:"
	fenceSuffix   = ":fence"
	channelSuffix = ":released"
	holdPrefix    = "hold:"
)

// A Locker acquires locks in one Redis deployment and keeps the leases of the locks it holds alive
// with a single watchdog on a timing wheel. Create one with [New] and share it: a Locker is safe for
// concurrent use by any number of goroutines, and each Locker costs one periodic timer while it
// holds watchdog locks, one pub/sub connection while goroutines wait in [Locker.Lock] (kept for a
// few seconds after the last wait), and no goroutine when idle.
type Locker struct {
	rdb     redis.UniversalClient
	wheel   *tock.Wheel
	timeout time.Duration
	// replicaWait bounds the wait for a replica to acknowledge an acquisition or a renewal; 0: no
	// waiting.
	replicaWait time.Duration
	logger      *slog.Logger
	epoch       time.Time // the origin of sinceEpoch, with a monotonic clock reading

	// group maps a lock key to the batch it may share one script call with: the cluster slot for a
	// ClusterClient, the hash tag for a Ring (whose shards are not known here), and one group for a
	// single server.
	group func(key string) string

	dog watchdog
	sub subscriber

	testHookWait   func() // called by Lock each time it starts waiting; nil outside tests
	testHookUnlock func() // called by Unlock when the release script has returned; nil outside tests
}

// New returns a Locker that keeps its locks in rdb, which may be a [*redis.Client] (one server, or
// Sentinel through [redis.NewFailoverClient]), a [*redis.ClusterClient] or a [*redis.Ring]. See the
// package doc for what each promises.
//
// New panics if rdb is nil or an option is invalid, naming the option, with an error wrapping
// [ErrInvalidOption]: both can only be bugs in the calling program, as New does no I/O.
func New(rdb redis.UniversalClient, opts ...Option) *Locker {
	if rdb == nil {
		panic(fmt.Errorf("%w: New: nil Redis client", ErrInvalidOption))
	}
	l := &Locker{rdb: rdb, timeout: DefaultWatchdogTimeout, replicaWait: DefaultReplicaWait, epoch: time.Now()}
	for _, o := range opts {
		if o != nil {
			o(l)
		}
	}
	if l.logger == nil {
		l.logger = slog.Default()
	}
	if l.wheel == nil {
		l.wheel = tock.New()
	}
	switch rdb.(type) {
	case *redis.ClusterClient:
		l.group = func(key string) string { return strconv.Itoa(rediskit.Slot(key)) }
	case *redis.Ring:
		l.group = rediskit.HashTag
	default:
		l.group = func(string) string { return "" }
	}
	l.dog.init(l)
	l.sub.rdb, l.sub.wheel, l.sub.linger = rdb, l.wheel, subscriptionLinger
	return l
}

// invalid reports an invalid option from New.
func (l *Locker) invalid(what string) {
	panic(fmt.Errorf("%w: %s", ErrInvalidOption, what))
}

// TryLock acquires the named lock if it is free, or adds a hold if it is held by the owner given
// with [WithOwner], and returns an error wrapping [ErrNotAcquired] at once if another owner holds
// it. Errors that pass by themselves (a connection refused or reset, a failover or a resharding in
// progress) are retried for up to the lock's lease, or until ctx ends. It fails with
// [ErrSlowReply] if Redis granted the lock too late to be of use, and with [ErrNotReplicated] if no
// replica acknowledged it in time (see [WithReplicaWait]); either way the acquisition is released.
// Other errors come from Redis or from invalid arguments ([ErrInvalidName], [ErrInvalidOption]).
func (l *Locker) TryLock(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	c, err := l.config(name, opts)
	if err != nil {
		return nil, err
	}
	lk, _, err := l.acquire(ctx, name, c)
	if err != nil {
		return nil, err
	}
	if lk == nil {
		return nil, fmt.Errorf("%w (lock %q)", ErrNotAcquired, name)
	}
	return lk, nil
}

// Lock acquires the named lock, waiting while another owner holds it until it is released or its
// lease runs out, or until ctx ends, when it returns an error wrapping ctx.Err(). A waiter is woken
// by the release's pub/sub message and, should that be lost, by a timer on the wheel set to the
// holder's remaining time to live; it does not poll. Each release wakes the goroutine of this
// Locker that has waited longest (see the package doc for the order across Lockers). Other errors
// are those of [Locker.TryLock], returned at once.
func (l *Locker) Lock(ctx context.Context, name string, opts ...LockOption) (*Lock, error) {
	c, err := l.config(name, opts)
	if err != nil {
		return nil, err
	}
	channel := channelName(name)
	if !l.sub.subscribed(channel) {
		// Try before subscribing: most locks are free.
		lk, _, err := l.acquire(ctx, name, c)
		if err != nil || lk != nil {
			return lk, err
		}
	}
	// Register as a waiter before the try that decides whether to wait, so that a release between
	// that try and the wait cannot go unnoticed. A lock whose channel this Locker is still
	// subscribed to was contended moments ago: it is likely held, so join at once.
	w, err := l.sub.join(ctx, channel)
	if err != nil {
		return nil, fmt.Errorf("redislock: lock %q: wait: %w", name, err)
	}
	defer l.sub.leave(w)
	for {
		lk, ttl, err := l.acquire(ctx, name, c)
		if err != nil || lk != nil {
			return lk, err
		}
		if ttl < 0 {
			// The key has no expiry (written by something else) or vanished between two calls
			// inside the script; neither should happen, so look again after a watchdog period.
			ttl = l.timeout / 3
		}
		// Redis expires a key once its time to live has passed; one millisecond more makes sure
		// the retry finds it gone.
		t, err := l.wheel.AfterFunc(ttl+time.Millisecond, w.notify)
		if err != nil {
			return nil, fmt.Errorf("redislock: lock %q: wait: %w", name, err)
		}
		if l.testHookWait != nil {
			l.testHookWait()
		}
		select {
		case <-w.wake:
			t.Stop()
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("redislock: lock %q: %w", name, ctx.Err())
		}
	}
}

// config validates an acquisition's arguments.
func (l *Locker) config(name string, opts []LockOption) (*lockConfig, error) {
	if name == "" || strings.ContainsRune(name, '}') {
		return nil, fmt.Errorf("%w: %q", ErrInvalidName, name)
	}
	c := &lockConfig{}
	for _, o := range opts {
		if o != nil {
			o(c)
		}
	}
	if c.err != nil {
		return nil, c.err
	}
	if c.owner == "" {
		c.owner = rand.Text()
	}
	c.hold = holdPrefix + rand.Text()
	return c, nil
}

func lockKey(name string) string     { return keyPrefix + "{" + name + "}" }
func fenceKey(name string) string    { return lockKey(name) + fenceSuffix }
func channelName(name string) string { return lockKey(name) + channelSuffix }

// millis rounds d up to whole milliseconds, the unit of PEXPIRE.
func millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// isNoScript reports whether err is Redis's answer to EVALSHA of a script it does not have.
func isNoScript(err error) bool {
	return err != nil && redis.HasErrorPrefix(err, "NOSCRIPT")
}
