package redislock

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/tockwheel/tock"
)

// DefaultWatchdogTimeout is the lease the watchdog keeps renewing when [WithWatchdogTimeout] is not
// given, the same as Redisson's lockWatchdogTimeout.
const DefaultWatchdogTimeout = 30 * time.Second

// MinWatchdogTimeout is the shortest watchdog timeout [WithWatchdogTimeout] accepts: the watchdog
// renews every third of it, and Redis counts leases in milliseconds.
const MinWatchdogTimeout = 10 * time.Millisecond

// An Option configures a [Locker] in [New]. A nil Option is ignored.
type Option func(*Locker)

// WithWheel makes the Locker schedule its renewals and wake-ups on w, a wheel shared with the rest
// of the program. The Locker never stops a wheel given to it; if w is stopped, acquisitions fail
// with an error wrapping [tock.ErrStopped] and held locks are lost. Lost is closed by a timer on w,
// so a goroutine blocked on it wakes up to w's tick late (see [Lock.Lost]). A nil w means a wheel of
// the Locker's own with the default tick, which, like every tock wheel, holds no goroutine while
// nothing is scheduled.
func WithWheel(w *tock.Wheel) Option {
	return func(l *Locker) { l.wheel = w }
}

// WithWatchdogTimeout sets the lease of locks taken without [WithLease]: the watchdog renews it every
// d/3 for as long as the lock is held, so a holder that dies frees the lock at most d after its last
// renewal. The default is [DefaultWatchdogTimeout]. New panics if d is below [MinWatchdogTimeout].
func WithWatchdogTimeout(d time.Duration) Option {
	return func(l *Locker) {
		if d < MinWatchdogTimeout {
			l.invalid(fmt.Sprintf("WithWatchdogTimeout(%v): below MinWatchdogTimeout (%v)", d, MinWatchdogTimeout))
			return
		}
		l.timeout = d
	}
}

// WithLogger sets where the Locker reports renewal failures, at warning level. They are retried,
// and a lock whose lease runs out meanwhile is reported to its holder through [Lock.Lost]. A nil
// logger means [slog.Default], the default.
func WithLogger(logger *slog.Logger) Option {
	return func(l *Locker) { l.logger = logger }
}

// A LockOption configures one acquisition in [Locker.Lock] or [Locker.TryLock]. A nil LockOption is
// ignored.
type LockOption func(*lockConfig)

type lockConfig struct {
	lease time.Duration // 0: watchdog
	owner string        // "": a fresh random owner, so no reentrancy
	hold  string        // the hold field of this acquisition, fixed across the tries of one Lock
	err   error
}

// WithLease gives the lock a fixed lease of d, rounded up to a millisecond: the watchdog does not
// renew it, the lock frees itself d after it was acquired unless unlocked before, and [Lock.Lost] is
// closed then. A d <= 0 makes the call fail with an error wrapping [ErrInvalidOption].
func WithLease(d time.Duration) LockOption {
	return func(c *lockConfig) {
		if d <= 0 {
			c.err = fmt.Errorf("%w: WithLease(%v): not positive", ErrInvalidOption, d)
			return
		}
		c.lease = d
	}
}

// WithOwner names the owner of the acquisition. An owner may acquire a lock it already holds
// (reentrancy): each acquisition adds a hold, each [Lock.Unlock] removes one, and the lock is free
// after as many unlocks as acquisitions. Every process and goroutine passing the same owner is the
// same owner to Redis, so choose tokens that are unique to the logical holder (a request id, a
// worker id). Without WithOwner each acquisition has an owner of its own, so a second Lock of the
// same name waits, as with [sync.Mutex]. An empty token makes the call fail with an error wrapping
// [ErrInvalidOption].
func WithOwner(token string) LockOption {
	return func(c *lockConfig) {
		if token == "" {
			c.err = fmt.Errorf("%w: WithOwner(\"\"): empty owner", ErrInvalidOption)
			return
		}
		c.owner = token
	}
}
