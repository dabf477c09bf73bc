package redislock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/tockwheel/tock"
)

// A Lock is one acquisition of a named lock, returned by [Locker.Lock] and [Locker.TryLock]. It is
// safe for concurrent use: any goroutine may wait on [Lock.Lost] while another calls [Lock.Unlock].
type Lock struct {
	l     *Locker
	name  string
	key   string
	owner string
	hold  string // this acquisition's hold field in the lock hash
	token int64

	lost     chan struct{}
	lostOnce sync.Once

	entry      *entry     // the watchdog entry renewing this lock; guarded by l.dog.mu; nil for a fixed lease
	leaseTimer tock.Timer // closes lost at the end of a fixed lease; set before the Lock is returned

	// unlocking is set while Unlock's release is in flight, and goneInUnlock when the watchdog found
	// the lock gone meanwhile: Unlock then decides whether it was lost or released. Guarded by l.dog.mu.
	unlocking, goneInUnlock bool

	mu struct {
		sync.Mutex // serializes Unlock
		done       bool
		result     error // what Unlock returns once done
	}
}

// Name returns the name the lock was acquired under.
func (lk *Lock) Name() string { return lk.name }

// Owner returns the owner token of the acquisition: the one given with [WithOwner], or a random one.
func (lk *Lock) Owner() string { return lk.owner }

// Token returns the fencing token of the acquisition: a number that increases with every
// acquisition of the lock's name, so that a storage system that remembers the highest token it has
// seen can reject writes from a holder whose lock was lost and taken by someone else since. An
// owner that acquires a lock it already holds (see [WithOwner]) gets the token of the acquisition it
// already holds. Tokens count up from 1 and survive the lock key: they are reset only if the fence
// key is lost, as it is when Redis restarts without persistence.
func (lk *Lock) Token() int64 { return lk.token }

// Lost returns a channel that is closed when the lock is no longer held although Unlock was not
// called: when the watchdog found its key gone or held by another acquisition, when the watchdog
// could not renew it (Redis unreachable) before its lease ran out, when its fixed lease ([WithLease])
// ended, or when [Lock.Unlock] found it gone. The holder should stop the work the lock protects. The
// channel is not closed by a successful Unlock.
func (lk *Lock) Lost() <-chan struct{} { return lk.lost }

// Unlock removes this acquisition's hold: the lock is free once every hold of its owner is removed,
// and waiters are woken then. It returns nil if the hold was removed, now or by an earlier call (a
// retry after an error whose release did reach Redis), and an error wrapping [ErrNotHeld] if the
// lock had been lost: its lease ran out or its key was deleted. Other errors come from Redis; the
// lock is then still held and renewed, and the call may be retried. Once Unlock has returned nil or
// ErrNotHeld, later calls return the same without contacting Redis.
func (lk *Lock) Unlock(ctx context.Context) error {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.mu.done {
		return lk.mu.result
	}
	// A renewal that runs after the release below must not take the freed key for a lost lock.
	lk.l.dog.beginUnlock(lk)
	defer func() { lk.l.dog.endUnlock(lk, lk.mu.done && lk.mu.result == nil) }()
	keys := []string{lk.key, fenceKey(lk.name)}
	v, err := releaseScript.Run(ctx, lk.l.rdb, keys, lk.token, lk.hold, channelName(lk.name), lk.owner).Result()
	if lk.l.testHookUnlock != nil {
		lk.l.testHookUnlock()
	}
	if err != nil {
		return fmt.Errorf("redislock: unlock %q: %w", lk.name, err)
	}
	n, ok := v.(int64)
	if !ok {
		return fmt.Errorf("redislock: unlock %q: %w: release script replied %v", lk.name, ErrProtocol, v)
	}
	switch n {
	case releasedHold, releasedLock, releasedRetry, releasedEarly:
		lk.mu.result = nil
	case releaseGone:
		lk.mu.result = fmt.Errorf("%w (lock %q, token %d)", ErrNotHeld, lk.name, lk.token)
		lk.markLost()
	default:
		return fmt.Errorf("redislock: unlock %q: %w: release script replied %d", lk.name, ErrProtocol, n)
	}
	lk.mu.done = true
	lk.leaseTimer.Stop()
	lk.l.dog.remove(lk)
	return lk.mu.result
}

// markLost closes the Lost channel; later calls do nothing.
func (lk *Lock) markLost() {
	lk.lostOnce.Do(func() { close(lk.lost) })
}

// expireAt arranges for Lost to close at the end of a fixed lease.
func (lk *Lock) expireAt(deadline time.Time) error {
	t, err := lk.l.wheel.AtFunc(deadline, lk.markLost)
	if err != nil {
		return err
	}
	lk.leaseTimer = t
	return nil
}
