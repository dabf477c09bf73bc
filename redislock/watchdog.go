package redislock

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock"
)

// An entry is one acquisition renewed by the watchdog. The Locks of an owner that holds a lock
// several times through the same Locker share it.
type entry struct {
	key      string
	token    int64
	tokenArg string // token in decimal, as the renew script compares it
	owner    string
	locks    map[*Lock]struct{}
	// deadline is the latest time the lease is known to last until: the start of the last
	// successful renewal (or of the acquisition) plus the lease. Redis set the expiry a little after
	// that start, so the lease does not end before deadline.
	deadline time.Time
}

// entryKey identifies an acquisition. The owner is part of it because a Redis restart without
// persistence lets a token be handed out again, possibly to another owner through the same Locker.
type entryKey struct {
	key   string
	token int64
	owner string
}

// watchdog renews the leases of a Locker's watchdog locks. One periodic timer on the wheel starts a
// renewal round every timeout/3; the round runs on a goroutine of its own, which exists only while
// the round's Redis calls are in flight, so a slow Redis never holds up the wheel's callbacks. After
// a round that fails, the periodic timer is reset to run again in timeout/12, so a failing round is
// retried every timeout/12 until one succeeds. A second timer fires at the earliest deadline of
// all entries and declares lost the ones whose lease has run out by then, so Lost is closed on time
// even while a round hangs on an unreachable Redis.
type watchdog struct {
	l          *Locker
	period     time.Duration
	retryDelay time.Duration
	margin     time.Duration // lostMargin of the watchdog timeout
	running    atomic.Bool   // a round is in flight; kicks are dropped meanwhile
	urgent     atomic.Bool   // a lock was added that needs a round before the next period

	perSlot atomic.Bool // renew with one script per slot: Redis refused renewNodeSrc (before 7.0)

	nodes struct {
		sync.Mutex
		m map[string]nodeState // by address
	}

	mu struct {
		sync.Mutex
		entries   map[entryKey]*entry
		ticker    tock.Timer // the periodic round; pending exactly while entries is non-empty
		expiry    tock.Timer // pending while expiryAt is not zero
		expiryAt  time.Time
		expiryGen uint64 // identifies the current expiry timer, so a stale one that fires does nothing
	}
}

func (d *watchdog) init(l *Locker) {
	d.l = l
	d.period = l.timeout / 3
	d.retryDelay = l.timeout / 12
	d.margin = lostMargin(l.timeout)
	d.mu.entries = make(map[entryKey]*entry)
	d.nodes.m = make(map[string]nodeState)
}

// add makes the watchdog renew lk, whose lease is known to last until deadline.
func (d *watchdog) add(lk *Lock, deadline time.Time) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := entryKey{lk.key, lk.token, lk.owner}
	e := d.mu.entries[k]
	if e == nil {
		if len(d.mu.entries) == 0 {
			t, err := d.l.wheel.Every(d.period, d.kick)
			if err != nil {
				return err
			}
			d.mu.ticker = t
		}
		e = &entry{
			key:      lk.key,
			token:    lk.token,
			tokenArg: strconv.FormatInt(lk.token, 10),
			owner:    lk.owner,
			locks:    make(map[*Lock]struct{}, 1),
		}
		d.mu.entries[k] = e
	}
	if deadline.After(e.deadline) {
		e.deadline = deadline
	}
	e.locks[lk] = struct{}{}
	lk.entry = e
	d.setLostAtLocked(e)
	if err := d.armExpiryLocked(d.lostAt(e)); err != nil {
		d.removeLocked(lk)
		return err
	}
	if time.Until(d.lostAt(e)) < d.period {
		// A slow acquisition left less than a period of lease: the next round may come too late.
		d.urgent.Store(true)
		d.kick()
	}
	return nil
}

// beginUnlock marks lk as being unlocked; see lostLocked.
func (d *watchdog) beginUnlock(lk *Lock) {
	d.mu.Lock()
	defer d.mu.Unlock()
	lk.unlocking = true
}

// endUnlock ends what beginUnlock began. If the watchdog found lk gone meanwhile and Unlock did not
// release it, the lock was lost.
func (d *watchdog) endUnlock(lk *Lock, released bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if lk.goneInUnlock && !released {
		lk.markLost()
	}
	lk.unlocking, lk.goneInUnlock = false, false
}

// count returns the number of acquisitions being renewed.
func (d *watchdog) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.mu.entries)
}

// remove stops renewing lk; the entry goes when its last Lock does.
func (d *watchdog) remove(lk *Lock) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.removeLocked(lk)
}

func (d *watchdog) removeLocked(lk *Lock) {
	e := lk.entry
	if e == nil {
		return
	}
	lk.entry = nil
	lk.lostAt.Store(0)
	delete(e.locks, lk)
	if len(e.locks) == 0 {
		d.dropLocked(e)
	}
}

// lostLocked closes Lost of every Lock of e and stops renewing it. When a renewal found e's key gone
// (found), a Lock being unlocked is left to Unlock to decide, as its release may have freed the key;
// a lease that ran out is lost whatever Unlock finds.
func (d *watchdog) lostLocked(e *entry, found bool) {
	for lk := range e.locks {
		lk.entry = nil
		if found && lk.unlocking {
			lk.goneInUnlock = true
			continue
		}
		lk.markLost()
	}
	clear(e.locks)
	d.dropLocked(e)
}

// dropLocked removes e and, with the last entry, every timer of the watchdog.
func (d *watchdog) dropLocked(e *entry) {
	k := entryKey{e.key, e.token, e.owner}
	if d.mu.entries[k] != e {
		return
	}
	delete(d.mu.entries, k)
	if len(d.mu.entries) > 0 {
		return
	}
	d.mu.ticker.Stop()
	d.mu.expiry.Stop()
	d.mu.expiryAt = time.Time{}
	d.mu.expiryGen++
}

// armExpiryLocked makes sure the expiry timer fires no later than at.
func (d *watchdog) armExpiryLocked(at time.Time) error {
	if !d.mu.expiryAt.IsZero() && !at.Before(d.mu.expiryAt) {
		return nil
	}
	d.mu.expiry.Stop()
	d.mu.expiryGen++
	gen := d.mu.expiryGen
	t, err := d.l.wheel.AtFunc(at, func() { d.expire(gen) })
	if err != nil {
		d.mu.expiryAt = time.Time{}
		return err
	}
	d.mu.expiry, d.mu.expiryAt = t, at
	return nil
}

// lostAt returns when e counts as lost: the end of its lease less the safety margin.
func (d *watchdog) lostAt(e *entry) time.Time { return e.deadline.Add(-d.margin) }

// setLostAtLocked tells the Locks of e when e counts as lost, for Lock.Lost.
func (d *watchdog) setLostAtLocked(e *entry) {
	at := d.l.at(d.lostAt(e))
	for lk := range e.locks {
		lk.lostAt.Store(at)
	}
}

// expire declares lost every entry whose lease has ended, less the safety margin, and re-arms
// itself for the next one. It runs on the wheel and does no I/O.
func (d *watchdog) expire(gen uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if gen != d.mu.expiryGen {
		return
	}
	d.mu.expiryAt = time.Time{}
	now := time.Now()
	var next time.Time
	for _, e := range d.mu.entries {
		if at := d.lostAt(e); !at.After(now) {
			d.lostLocked(e, false)
		} else if next.IsZero() || at.Before(next) {
			next = at
		}
	}
	if next.IsZero() {
		return
	}
	if err := d.armExpiryLocked(next); err != nil {
		// The wheel was stopped: nothing can be renewed or timed any more.
		for _, e := range d.mu.entries {
			d.lostLocked(e, false)
		}
	}
}

// kick starts a renewal round unless one is in flight. It runs on the wheel and returns at once.
func (d *watchdog) kick() {
	if d.running.CompareAndSwap(false, true) {
		go d.round()
	}
}

// round renews every entry once.
func (d *watchdog) round() {
	d.urgent.Store(false) // this round serves any urgent request made so far
	d.mu.Lock()
	es := make([]*entry, 0, len(d.mu.entries))
	for _, e := range d.mu.entries {
		es = append(es, e)
	}
	d.mu.Unlock()
	if len(es) == 0 {
		d.running.Store(false)
		return
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), d.period)
	outcomes, failure := d.renew(ctx, es)
	cancel()
	if failure != nil {
		d.l.reloadAfter(failure)
	}

	d.mu.Lock()
	deadline := start.Add(d.l.timeout)
	retry := false
	for i, e := range es {
		if d.mu.entries[entryKey{e.key, e.token, e.owner}] != e {
			continue // unlocked or lost during the round
		}
		switch outcomes[i] {
		case renewed:
			if deadline.After(e.deadline) {
				e.deadline = deadline
				d.setLostAtLocked(e)
			}
		case gone:
			d.lostLocked(e, true)
		default:
			retry = true
		}
	}
	closed := errors.Is(failure, redis.ErrClosed)
	if closed {
		// The client was closed: nothing can be renewed any more.
		for _, e := range d.mu.entries {
			d.lostLocked(e, false)
		}
	}
	d.running.Store(false)
	if retry && len(d.mu.entries) > 0 {
		// Bring the next round forward; rounds go on every period from there.
		d.mu.ticker.Reset(d.retryDelay)
	}
	d.mu.Unlock()
	if d.urgent.Load() {
		d.kick() // a lock added during the round, which the round did not renew
	}
	switch {
	case closed:
		d.l.logger.Warn("redislock: renewal failed: the Redis client is closed; every lock is lost",
			slog.Int("locks", len(es)))
	case failure != nil:
		d.l.logger.Warn("redislock: renewal failed; retrying until the leases end",
			slog.Int("locks", len(es)), slog.Any("error", failure))
	}
}
