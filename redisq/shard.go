package redisq

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	"github.com/tockwheel/tock/internal/rediskit"
	"github.com/tockwheel/tock/redislock"
)

// Housekeeping parameters.
const (
	// tickBudget bounds the messages one tick promotes, and the leases it expires: a few
	// milliseconds of Redis's time, so that other commands are not held up by a large second.
	tickBudget = 1000
	// leadBase and leadPerMessage make the owner's lead: how long before a second starts it is
	// promoted. promoteRate is the rate leadPerMessage assumes.
	leadBase       = 250 * time.Millisecond
	leadPerMessage = 10 * time.Microsecond
	maxLead        = 30 * time.Second
	// actTimeout bounds one housekeeping call.
	actTimeout = 5 * time.Second
	// candidacySpread spreads the processes' attempts to take a free shard: each tries at its own
	// offset ahead of the shard's time, up to half of it, and later by up to the other half the
	// more shards it owns.
	candidacySpread = time.Second
)

// A shard is this process's driver of one shard's housekeeping. It keeps what it knows of the
// shard's next times (from script replies and events), owns the shard's lock while the shard has
// work near, and keeps one timer: as owner, for the next tick, a lead ahead of the shard's next
// second; otherwise for taking the shard ahead of its next time when no one owns it, or for acting
// in the owner's place when the owner's event did not come a grace period after the owner should
// have ticked, which is still ahead of the second: a dead owner costs no lateness.
type shard struct {
	q       *Queue
	i       int
	stagger time.Duration // this process's offset from the others in taking the shard
	// fallbackStagger is this process's offset from the others in acting in the owner's place,
	// below half the grace, so that one process usually acts and the others see its event.
	fallbackStagger time.Duration

	mu struct {
		sync.Mutex
		lastVer int64 // the latest event count seen, in replies and events
		known   bool  // the times below are the shard's (false until a peek or a tick after subscribing)
		wsec    int64 // the earliest second with waiting messages; -1 none
		wcount  int64 // its count
		lms     int64 // the earliest lease deadline; -1 none
		owner   string
		lock    *redislock.Lock // held by this process
		token   string          // the lock's fencing token, as the tick script compares it
		run     runner          // runs act
	}
}

func newShard(q *Queue, i int) *shard {
	s := &shard{q: q, i: i,
		stagger:         time.Duration(rand.Int64N(int64(candidacySpread/2) + 1)),
		fallbackStagger: time.Duration(rand.Int64N(int64(q.cfg.grace/2) + 1)),
	}
	s.mu.wsec, s.mu.lms = -1, -1
	s.mu.run.init(q, &s.mu.Mutex, s.act)
	return s
}

// observe records an event count from an event and reports whether it is the latest seen.
func (s *shard) observe(ver int64) (fresh bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.observeLocked(ver)
}

// observeLocked is observe with s.mu held.
func (s *shard) observeLocked(ver int64) (fresh bool) {
	fresh = ver >= s.mu.lastVer
	if ver > s.mu.lastVer {
		s.mu.lastVer = ver
	}
	return fresh
}

// version returns the latest event count seen, to give observeReply with the reply of a script
// sent now.
func (s *shard) version() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.lastVer
}

// observeReply records the event count ver of a script's reply, sent when the latest count seen
// was sent, and reports whether it is the latest seen, so that what the reply says may replace
// what events said. A reply older than an event is normal (the event's script ran after the
// reply's, and its event came first), but not older than what was seen before the script was
// sent: the shard's count went back, which happens when its master is replaced by a replica that
// had not received the last writes (a failover). What was seen before is then another history,
// and the reply starts the count again: compared with counts that Redis will not reach again,
// every later reply would be taken for an old one, and a receiver that asks while it does not
// know the shard's head would ask again at once, forever (an idle process sent Redis 40,000
// commands a second after its shards' counts went back by 3).
func (s *shard) observeReply(ver, sent int64) (fresh bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ver < sent {
		s.mu.lastVer = ver
		return true
	}
	return s.observeLocked(ver)
}

// learn records the shard's next times from a reply: as they are when fresh, only the earlier
// otherwise. more says the script left housekeeping undone.
func (s *shard) learn(fresh bool, wsec, wcount, lms int64, more bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fresh {
		s.mu.wsec, s.mu.wcount, s.mu.lms = wsec, wcount, lms
		s.mu.known = true
	} else {
		s.earlierLocked(wsec, wcount, lms)
	}
	if more {
		s.mu.run.kickLocked()
		return
	}
	s.armLocked()
}

// earlierLocked lowers the next times to the given ones where they are earlier (-1: no news).
func (s *shard) earlierLocked(wsec, wcount, lms int64) {
	if wsec >= 0 && (s.mu.wsec < 0 || wsec < s.mu.wsec) {
		s.mu.wsec = wsec
		if wcount >= 0 {
			s.mu.wcount = wcount
		}
	}
	if lms >= 0 && (s.mu.lms < 0 || lms < s.mu.lms) {
		s.mu.lms = lms
	}
}

// event applies one of the shard's events (see the package doc).
func (s *shard) event(e event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch e.kind {
	case 'o':
		if e.owner != s.q.owner {
			s.mu.owner = e.owner
		}
	case 'm', 'n':
		fresh := s.observeLocked(e.ver)
		if e.kind == 'n' && fresh {
			s.mu.wsec, s.mu.wcount, s.mu.lms = e.wsec, e.wcount, e.lms
			s.mu.known = true
		} else {
			s.earlierLocked(e.wsec, e.wcount, e.lms)
		}
		if e.owner != "" && e.owner != s.q.owner {
			s.mu.owner = e.owner
		}
	}
	s.armLocked()
}

// unknown forgets the shard's times, after its events may have been lost; the next act reads them.
func (s *shard) unknown() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.mu.known = false
	s.mu.run.kickLocked()
}

// lead returns how long before a second with count messages the owner promotes it.
func lead(count int64) time.Duration {
	return min(leadBase+time.Duration(count)*leadPerMessage, maxLead)
}

// armLocked sets the timer for the shard's next action.
func (s *shard) armLocked() {
	if !s.mu.run.idleLocked() {
		return
	}
	if !s.mu.known {
		s.mu.run.kickLocked()
		return
	}
	wheelAt := int64(-1)
	if s.mu.wsec >= 0 {
		wheelAt = s.mu.wsec * 1000
	}
	event := earliest(wheelAt, s.mu.lms)
	if event < 0 {
		s.mu.run.setTimerLocked(0)
		if s.mu.lock != nil {
			s.mu.run.kickLocked() // nothing left: give the shard up
		}
		return
	}
	leadAt := earliest(wheelAt-lead(s.mu.wcount).Milliseconds(), s.mu.lms)
	if wheelAt < 0 {
		leadAt = s.mu.lms
	}
	var at int64
	switch {
	case s.mu.lock != nil:
		at = leadAt
		if at > s.q.clock.now()+s.releaseAfter().Milliseconds() {
			s.mu.run.kickLocked() // far away: give the shard up until then
			return
		}
	case s.mu.owner == "":
		// Take the shard before its time, later the more shards this process owns.
		at = leadAt - (s.stagger + s.q.ownedDelay()).Milliseconds()
	default:
		// Another process owns the shard: act in its place if its event has not come a grace
		// after it should have ticked.
		at = leadAt + (s.q.cfg.grace + s.fallbackStagger).Milliseconds()
	}
	s.mu.run.setTimerLocked(at)
}

// releaseAfter is how far away the next time must be for the owner to give the shard up.
func (s *shard) releaseAfter() time.Duration { return 3 * s.q.cfg.ownerLease }

func earliest(a, b int64) int64 {
	switch {
	case a < 0:
		return b
	case b < 0:
		return a
	}
	return min(a, b)
}

// act does what the shard needs now: read its times, take or give up its lock, tick.
func (s *shard) act() {
	err := s.step()
	if isStampErr(err) {
		// The shard lost its data, or the deployment was made anew: reconcile, then read the
		// shard's times again.
		ctx, cancel := context.WithTimeout(context.Background(), actTimeout)
		if _, err = s.q.afterStampErr(ctx, err); err == nil {
			s.mu.Lock()
			s.mu.known = false
			s.mu.Unlock()
		}
		cancel()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	again := s.mu.run.endLocked()
	if s.q.staleErr() != nil {
		return // this process no longer serves the deployment
	}
	if err != nil && !s.mu.run.stopped && !s.q.closed.Load() {
		s.q.logger().Warn("redisq: shard housekeeping failed; retrying", "shard", s.i, "error", err)
		// Try again after a while rather than at once.
		s.mu.run.setTimerLocked(s.q.clock.now() + 500)
		return
	}
	if again {
		s.mu.run.kickLocked()
		return
	}
	s.armLocked()
}

// step is one action of act.
func (s *shard) step() error {
	q := s.q
	ctx, cancel := context.WithTimeout(context.Background(), actTimeout)
	defer cancel()
	s.mu.Lock()
	known, lk, owner := s.mu.known, s.mu.lock, s.mu.owner
	wheelAt := int64(-1)
	if s.mu.wsec >= 0 {
		wheelAt = s.mu.wsec * 1000
	}
	event, wcount := earliest(wheelAt, s.mu.lms), s.mu.wcount
	leadAt := earliest(wheelAt-lead(wcount).Milliseconds(), s.mu.lms)
	if wheelAt < 0 {
		leadAt = s.mu.lms
	}
	s.mu.Unlock()
	if !known {
		return s.peek(ctx)
	}
	now := q.clock.now()
	if lk != nil {
		select {
		case <-lk.Lost():
			s.drop(lk)
			return nil
		default:
		}
		if event < 0 || leadAt > now+s.releaseAfter().Milliseconds() {
			return s.release(ctx, lk)
		}
		if leadAt > now {
			return nil // woken early (an event): the timer is set again
		}
		return s.tick(ctx, lk, wcount)
	}
	if event < 0 {
		return nil
	}
	// The owner ticks at leadAt; by a grace later its event has come unless it is late (paused,
	// dead, cut off).
	late := leadAt+q.cfg.grace.Milliseconds() <= now
	if owner == "" || late {
		if !late && (leadAt-(s.stagger+q.ownedDelay()).Milliseconds() > now || q.testHookNoCandidacy.Load()) {
			return nil // woken early
		}
		nlk, err := q.locker.TryLock(ctx, q.lay.lockName(s.i), redislock.WithOwner(q.owner))
		switch {
		case err == nil:
			return s.took(ctx, nlk, wcount)
		case !errors.Is(err, redislock.ErrNotAcquired):
			return err
		}
		s.mu.Lock()
		if s.mu.owner == "" {
			s.mu.owner = "?" // held by a process whose event has not come yet
		}
		s.mu.Unlock()
	}
	if !late {
		return nil
	}
	// The owner is late by the grace period: do its work, with its lead (so that a second is still
	// promoted before it starts) and without its token.
	q.metrics.fallbackTicks.Add(1)
	return s.tick(ctx, nil, wcount)
}

// took records that this process acquired the shard's lock, announces it and ticks.
func (s *shard) took(ctx context.Context, lk *redislock.Lock, wcount int64) error {
	s.mu.Lock()
	if s.mu.run.stopped {
		s.mu.Unlock()
		_ = lk.Unlock(ctx)
		return nil
	}
	s.mu.lock, s.mu.token, s.mu.owner = lk, strconv.FormatInt(lk.Token(), 10), s.q.owner
	s.mu.Unlock()
	s.q.metrics.owned.Add(1)
	s.q.metrics.acquisitions.Add(1)
	_ = s.q.rdb.SPublish(ctx, s.q.lay.channel(s.i), "o "+s.q.owner).Err()
	return s.tick(ctx, lk, wcount)
}

// drop forgets a lock that this process no longer holds.
func (s *shard) drop(lk *redislock.Lock) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.lock == lk {
		s.mu.lock, s.mu.token = nil, ""
		if s.mu.owner == s.q.owner {
			s.mu.owner = "?"
		}
		s.q.metrics.owned.Add(-1)
	}
}

// release gives the shard's lock up and announces it.
func (s *shard) release(ctx context.Context, lk *redislock.Lock) error {
	s.drop(lk)
	s.mu.Lock()
	s.mu.owner = ""
	s.mu.Unlock()
	err := lk.Unlock(ctx)
	if err != nil && !errors.Is(err, redislock.ErrNotHeld) {
		return err
	}
	return s.q.rdb.SPublish(ctx, s.q.lay.channel(s.i), "o -").Err()
}

// tick runs the tick script, with the lead of a second of wcount messages: as owner under lk's
// fencing token, or in the owner's place (lk nil), and repeats while it leaves work.
func (s *shard) tick(ctx context.Context, lk *redislock.Lock, wcount int64) error {
	q := s.q
	token, owner, leadMs := "", "", lead(wcount).Milliseconds()
	if lk != nil {
		token, owner = strconv.FormatInt(lk.Token(), 10), q.owner
	}
	for {
		args := append(q.cfgArgs(), token, owner, leadMs, tickBudget)
		sent := s.version()
		start := time.Now()
		v, err := tickScript.Run(ctx, q.rdb, q.lay.lockedKeys(s.i), q.withStamp(args...)...).Slice()
		q.metrics.observeScript(time.Since(start))
		if err != nil {
			if q.cluster != nil && rediskit.Reloads(err) {
				q.cluster.ReloadState(context.Background())
			}
			return fmt.Errorf("tick: %w", err)
		}
		if len(v) == 1 {
			// Fenced: another process holds the lock now; this one lost it without noticing.
			q.metrics.fenced.Add(1)
			s.drop(lk)
			return nil
		}
		if len(v) != 7 {
			return fmt.Errorf("%w: tick script replied %v", ErrProtocol, v)
		}
		nums := make([]int64, len(v))
		for i := range v {
			nums[i], _ = v[i].(int64)
		}
		now, ver, wsec, wc, lms, more, moved := nums[0], nums[1], nums[2], nums[3], nums[4], nums[5], nums[6]
		q.clock.observe(now, start)
		q.metrics.ticks.Add(1)
		q.metrics.promoted.Add(uint64(moved))
		fresh := s.observeReply(ver, sent)
		s.mu.Lock()
		if fresh {
			s.mu.wsec, s.mu.wcount, s.mu.lms = wsec, wc, lms
			s.mu.known = true
		} else {
			s.earlierLocked(wsec, wc, lms)
		}
		s.mu.Unlock()
		if more == 0 || ctx.Err() != nil {
			return nil
		}
		leadMs = lead(wc).Milliseconds()
	}
}

// peek reads the shard's times and the heads of the topics this process has receivers for.
func (s *shard) peek(ctx context.Context) error {
	q := s.q
	q.topics.Lock()
	names := make([]string, 0, len(q.topics.m))
	for name := range q.topics.m {
		names = append(names, name)
	}
	q.topics.Unlock()
	args := make([]any, len(names))
	for i, n := range names {
		args[i] = n
	}
	sent, sentAt := s.version(), time.Now()
	v, err := peekScript.Run(ctx, q.rdb, q.lay.lockedKeys(s.i), q.withStamp(args...)...).Slice()
	if err != nil {
		return fmt.Errorf("peek: %w", err)
	}
	if len(v) != 6+len(names) {
		return fmt.Errorf("%w: peek script replied %v", ErrProtocol, v)
	}
	num := func(i int) int64 { n, _ := v[i].(int64); return n }
	q.clock.observe(num(0), sentAt)
	q.metrics.peeks.Add(1)
	fresh := s.observeReply(num(1), sent)
	for i, name := range names {
		q.topic(name).setHead(q, s.i, num(6+i), fresh)
	}
	owner, _ := v[5].(string)
	s.mu.Lock()
	defer s.mu.Unlock()
	if fresh || !s.mu.known {
		s.mu.wsec, s.mu.wcount, s.mu.lms = num(2), num(3), num(4)
	} else {
		s.earlierLocked(num(2), num(3), num(4))
	}
	s.mu.known = true
	if s.mu.lock == nil {
		s.mu.owner = owner
	}
	return nil
}

// stop ends the driver and gives up the shard's lock.
func (s *shard) stop() {
	s.mu.Lock()
	s.mu.run.stopLocked()
	lk := s.mu.lock
	s.mu.lock = nil
	s.mu.Unlock()
	if lk != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		s.q.metrics.owned.Add(-1)
		if lk.Unlock(ctx) == nil {
			_ = s.q.rdb.SPublish(ctx, s.q.lay.channel(s.i), "o -").Err()
		}
	}
}

// ownedDelay is how much later than a process owning no shard this one tries to take a free one.
func (q *Queue) ownedDelay() time.Duration {
	return min(time.Duration(q.metrics.owned.Load())*10*time.Millisecond, candidacySpread/2)
}

// String describes the driver's state, for logs and test failures.
func (s *shard) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return fmt.Sprintf("shard %d: known %v, next second %d (%d messages), next lease deadline %d, owner %q (this process %q, holding %v), timer at %d, busy %v, now %d",
		s.i, s.mu.known, s.mu.wsec, s.mu.wcount, s.mu.lms, s.mu.owner, s.q.owner, s.mu.lock != nil, s.mu.run.timerAt, s.mu.run.busy, s.q.clock.now())
}
