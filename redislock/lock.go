package redislock

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
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
	// lostAt is when, on the Locker's monotonic clock (see sinceEpoch), the lease the Locker knows
	// of ends less the safety margin, and 0 once Unlock has released the lock. The watchdog moves it
	// under l.dog.mu with every renewal.
	lostAt atomic.Int64

	entry      *entry     // the watchdog entry renewing this lock; guarded by l.dog.mu; nil for a fixed lease
	leaseTimer tock.Timer // closes lost at the end of a fixed lease; set before the Lock is returned

	// unlocking is set while Unlock's release is in flight, and goneInUnlock when the watchdog found
	// the lock gone meanwhile: Unlock then decides whether it was lost or released. Guarded by l.dog.mu.
	unlocking, goneInUnlock bool

	// unlock is a semaphore of one, held by the Unlock call in progress: calls take turns, and one
	// that waits for its turn still returns when its context ends, which a mutex held across the
	// release's I/O would not allow. unlocked and result are guarded by holding it.
	unlock   chan struct{}
	unlocked bool  // a release reached Redis and settled the outcome
	result   error // what Unlock returns once unlocked
}

// Name returns the name the lock was acquired under.
func (lk *Lock) Name() string { return lk.name }

// Owner returns the owner token of the acquisition: the one given with [WithOwner], or a random one.
func (lk *Lock) Owner() string { return lk.owner }

// Token returns the fencing token of the acquisition: a number above every token handed out before
// for the lock's name, so that a storage system that remembers the highest token it has seen can
// reject writes from a holder whose lock was lost and taken by someone else since. An owner that
// acquires a lock it already holds (see [WithOwner]) gets the token of the acquisition it already
// holds.
//
// A name's first token is Redis's clock in microseconds since 1970 (about 1.8e15), and each later
// one is one more, except after a failover or a restart that may have lost acquisitions, where it is
// a million more, or Redis's clock if that is further. So tokens never repeat, with or without
// persistence and whether or not the acquisitions reached a replica, unless a failover or restart
// loses more than a million acquisitions of the name, or Redis loses the fence key (a restart
// without persistence, FLUSHALL, eviction) while its clock reads below the name's last token; see
// the package doc. Tokens stay below 2^53.
func (lk *Lock) Token() int64 { return lk.token }

// Lost returns a channel that is closed when the lock is no longer held although Unlock was not
// called: when the watchdog found its key gone or held by another acquisition, when the watchdog
// could not renew it (Redis unreachable) before its lease ran out, when its fixed lease ([WithLease])
// ended, or when [Lock.Unlock] found it gone. The holder should stop the work the lock protects. The
// channel is not closed by a successful Unlock.
//
// A lease counts as ended a safety margin before its end by the Locker's clock, counted from before
// the request that set it: two milliseconds (a tick of tock's default wheel and as much again for
// the scheduler) plus a thousandth of the lease (for the rates of the Locker's and Redis's clocks
// differing by up to 1000 ppm). So Lost is closed before Redis expires the key and another owner
// can acquire it. Lost checks the time itself whenever it is called, so a check made after another
// owner acquired the lock finds the channel closed however late the timer that closes it runs; a
// goroutine blocked on the channel is woken by that timer, on the Locker's wheel.
func (lk *Lock) Lost() <-chan struct{} {
	if lk.leaseEnded() {
		lk.markLost()
	}
	return lk.lost
}

// Unlock removes this acquisition's hold: the lock is free once every hold of its owner is removed,
// and waiters are woken then. It returns nil if the hold was removed, now or by an earlier call (a
// retry after an error whose release did reach Redis), and an error wrapping [ErrNotHeld] if the
// lock had been lost: its lease ran out or its key was deleted. Other errors come from Redis; the
// lock is then still held and renewed, and the call may be retried. Errors that pass by themselves
// (a connection refused, a failover in progress) are retried until ctx ends or the lease does,
// after which the lock is lost and Unlock returns ErrNotHeld. Once Unlock has returned nil or
// ErrNotHeld, later calls return the same without contacting Redis. Concurrent calls take turns; a
// call waiting for its turn returns when ctx ends.
func (lk *Lock) Unlock(ctx context.Context) error {
	select {
	case lk.unlock <- struct{}{}:
	default:
		// Another Unlock is in progress: wait for its outcome, or for ctx.
		select {
		case lk.unlock <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("redislock: unlock %q: %w", lk.name, ctx.Err())
		}
	}
	defer func() { <-lk.unlock }()
	if lk.unlocked {
		return lk.result
	}
	// A renewal that runs after the release below must not take the freed key for a lost lock.
	lk.l.dog.beginUnlock(lk)
	defer func() { lk.l.dog.endUnlock(lk, lk.unlocked && lk.result == nil) }()
	// Retry transient errors, as in a failover, for as long as the lease may last: after that the
	// lock is lost whatever Redis would answer.
	var v any
	err := lk.l.retry(ctx, lk.leaseLeft(), func() error {
		var err error
		v, err = releaseScript.Run(ctx, lk.l.rdb, lk.releaseKeys(), lk.releaseArgs()...).Result()
		return err
	})
	if lk.l.testHookUnlock != nil {
		lk.l.testHookUnlock()
	}
	if err != nil {
		if !lk.leaseEnded() {
			return fmt.Errorf("redislock: unlock %q: %w", lk.name, err)
		}
		lk.result = fmt.Errorf("%w (lock %q, token %d): the lease ended before Redis could be reached: %w",
			ErrNotHeld, lk.name, lk.token, err)
		lk.markLost()
	} else {
		n, ok := v.(int64)
		if !ok {
			return fmt.Errorf("redislock: unlock %q: %w: release script replied %v", lk.name, ErrProtocol, v)
		}
		switch n {
		case releasedHold, releasedLock, releasedRetry, releasedEarly:
			lk.result = nil
		case releaseGone:
			lk.result = fmt.Errorf("%w (lock %q, token %d)", ErrNotHeld, lk.name, lk.token)
			lk.markLost()
		default:
			return fmt.Errorf("redislock: unlock %q: %w: release script replied %d", lk.name, ErrProtocol, n)
		}
	}
	lk.unlocked = true
	lk.leaseTimer.Stop()
	if lk.result == nil {
		lk.lostAt.Store(0)
	}
	lk.l.dog.remove(lk)
	return lk.result
}

// leaseLeft returns the time until the lease counts as ended, or 0 if it has.
func (lk *Lock) leaseLeft() time.Duration {
	at := lk.lostAt.Load()
	if at == 0 {
		return 0
	}
	return max(time.Duration(at-lk.l.sinceEpoch()), 0)
}

// leaseEnded reports whether the lease counts as ended.
func (lk *Lock) leaseEnded() bool {
	at := lk.lostAt.Load()
	return at != 0 && lk.l.sinceEpoch() >= at
}

// markLost closes the Lost channel; later calls do nothing.
func (lk *Lock) markLost() {
	lk.lostOnce.Do(func() { close(lk.lost) })
}

// expireAt arranges for Lost to close at lostAt, the end of a fixed lease less the safety margin.
func (lk *Lock) expireAt(lostAt time.Time) error {
	lk.lostAt.Store(lk.l.at(lostAt))
	t, err := lk.l.wheel.AtFunc(lostAt, lk.markLost)
	if err != nil {
		return err
	}
	lk.leaseTimer = t
	return nil
}
