package redislock

import (
	"time"

	"github.com/tockwheel/tock"
)

// MinLease is the shortest fixed lease [WithLease] accepts. A lease must outlast the safety margin
// by which [Lock.Lost] closes early (2 ms and a thousandth of the lease) with room to spare.
const MinLease = 10 * time.Millisecond

// The safety margin: Lost closes this much before the lease ends by the Locker's clock, counted
// from before the request that set it. Redis expires the key no earlier than that end by its own
// clock, as it set the expiry after the request was sent; the margin covers what can make the
// Locker's reckoning later than Redis's.
const (
	// lostTimerAllowance covers the lateness of the timer on the wheel that closes Lost: one tick
	// of a wheel with tock's default tick, and as much again for the Go scheduler to run it.
	lostTimerAllowance = 2 * tock.DefaultTick

	// clockRateAllowance is the largest difference between the rates of the Locker's clock and
	// Redis's that the margin covers, as a fraction of the lease: 1/1000 (1000 ppm), twice the
	// 500 ppm at which NTP slews a clock at most.
	clockRateAllowance = 1000
)

// lostMargin returns how much earlier than its end a lease of length lease counts as lost.
func lostMargin(lease time.Duration) time.Duration {
	return lostTimerAllowance + lease/clockRateAllowance
}

// sinceEpoch returns the Locker's monotonic clock: the time since it was made, in nanoseconds.
func (l *Locker) sinceEpoch() int64 { return int64(time.Since(l.epoch)) }

// at converts a time to the Locker's monotonic clock.
func (l *Locker) at(t time.Time) int64 { return int64(t.Sub(l.epoch)) }
