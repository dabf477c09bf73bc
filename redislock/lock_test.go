package redislock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/internal/testwait"
)

// waitClosed fails the test unless c is closed within limit, a bound on a bug rather than a timing
// the test relies on.
func waitClosed(t *testing.T, c <-chan struct{}, limit time.Duration, what string) {
	t.Helper()
	timer := time.NewTimer(limit)
	defer timer.Stop()
	select {
	case <-c:
	case <-timer.C:
		t.Fatalf("%s: not within %v", what, limit)
	}
}

func TestTryLockExcludesOtherOwners(t *testing.T) {
	s := redistest.Start(t)
	a, b := newLocker(t, s), newLocker(t, s)
	ctx := context.Background()
	la, err := a.TryLock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx, "job"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock of a held lock from another Locker: err = %v, want ErrNotAcquired", err)
	}
	// Without WithOwner even the same Locker is another owner.
	if _, err := a.TryLock(ctx, "job"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("second TryLock from the same Locker: err = %v, want ErrNotAcquired", err)
	}
	if _, err := b.TryLock(ctx, "other"); err != nil {
		t.Fatalf("TryLock of another name: %v", err)
	}
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryLock(ctx, "job")
	if err != nil {
		t.Fatalf("TryLock after Unlock: %v", err)
	}
	if lb.Token() <= la.Token() {
		t.Fatalf("token after re-acquisition %d, want > %d", lb.Token(), la.Token())
	}
}

// TestMutualExclusionUnderContention runs goroutines of several Lockers, each with its own client
// as separate processes would have, through one lock, and checks that no two critical sections
// overlap and that the fencing tokens they saw are strictly increasing.
func TestMutualExclusionUnderContention(t *testing.T) {
	s := redistest.Start(t)
	const lockers, perLocker, rounds = 4, 3, 15
	var (
		inside  atomic.Int32
		overlap atomic.Int32
		mu      sync.Mutex // guards tokens; taken inside the critical section only to record
		tokens  []int64
		wg      sync.WaitGroup
	)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for range lockers {
		l := newLocker(t, s)
		for range perLocker {
			wg.Go(func() {
				for range rounds {
					lk, err := l.Lock(ctx, "counter")
					if err != nil {
						t.Error(err)
						return
					}
					if inside.Add(1) != 1 {
						overlap.Add(1)
					}
					mu.Lock()
					tokens = append(tokens, lk.Token())
					mu.Unlock()
					inside.Add(-1)
					if err := lk.Unlock(ctx); err != nil {
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	if n := overlap.Load(); n != 0 {
		t.Fatalf("%d critical sections overlapped", n)
	}
	if len(tokens) != lockers*perLocker*rounds {
		t.Fatalf("%d acquisitions, want %d", len(tokens), lockers*perLocker*rounds)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d after %d: fencing tokens must increase", tokens[i], tokens[i-1])
		}
	}
}

// TestLockWokenByRelease checks that a waiter is woken by the release message: the holder's lease
// is of an hour, so that the waiter's fallback timer, which would wake it when the lease ran out,
// cannot within the test's minute.
func TestLockWokenByRelease(t *testing.T) {
	s := redistest.Start(t)
	a, b := newLocker(t, s, WithWatchdogTimeout(time.Hour)), newLocker(t, s)
	b.sub.linger = 0 // check that the subscription is dropped when the waiter leaves
	waiting := notifyWaits(b, 1)
	ctx := context.Background()
	la, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *Lock, 1)
	go func() {
		lb, err := b.Lock(ctx, "job")
		if err != nil {
			t.Error(err)
		}
		got <- lb
	}()
	// Release only once b waits, subscribed, so that the release message is what wakes it.
	waitClosed(t, waiting, time.Minute, "waiter subscribed")
	if err := la.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case lb := <-got:
		if lb == nil {
			t.FailNow()
		}
		if err := lb.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("waiter not woken by the release within a minute")
	}
	if b.sub.mu.ps != nil {
		t.Fatal("pub/sub connection still open with no waiter")
	}
}

func TestLockContextEnds(t *testing.T) {
	s := redistest.Start(t)
	a, b := newLocker(t, s), newLocker(t, s)
	b.sub.linger = 0 // check that the subscription is dropped when the waiter leaves
	if _, err := a.Lock(context.Background(), "job"); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := b.Lock(ctx, "job")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock while held until ctx ends: err = %v, want DeadlineExceeded", err)
	}
	// A waiter that leaves before Redis confirmed its subscription leaves the topic to be dropped
	// when the confirmation comes (on a busy machine, after the 100 ms): so the state is waited
	// for, and what is still there after a minute was left behind.
	wctx, wcancel := context.WithTimeout(context.Background(), time.Minute)
	defer wcancel()
	testwait.Until(t, wctx, "the waiter's state to go (pub/sub connection and topics)", func() bool {
		b.sub.mu.Lock()
		defer b.sub.mu.Unlock()
		return b.sub.mu.ps == nil && len(b.sub.mu.topics) == 0
	})
}

// TestWatchdogKeepsShortLeaseAlive holds a lock with a short lease for eight leases while another
// Locker waits for it: a single missed renewal would let the waiter in, as its fallback timer
// retries when the holder's time to live runs out.
//
// The watchdog promises renewals every third of the lease, not that a loaded machine runs them in
// time: when a renewal reaches Redis more than a lease after the one before, the lease runs out as
// it should. So the holder's client times its script calls, and a round in which two successful
// calls (the acquisition, then each renewal) might have reached Redis more than a lease apart did
// not test the promise; the test runs again with a lease twice as long. A round whose calls were
// all in time must keep the lock (the watchdog's schedule itself is checked exactly, in a synctest
// bubble, by watchdog_test.go).
func TestWatchdogKeepsShortLeaseAlive(t *testing.T) {
	s := redistest.Start(t)
	for timeout := 300 * time.Millisecond; timeout <= 2400*time.Millisecond; timeout *= 2 {
		gap, ok := holdShortLease(t, s, timeout)
		if ok {
			return
		}
		t.Logf("a %v lease: successive renewals may have reached Redis %v apart, the lease could run out; "+
			"again with a longer one", timeout, gap)
	}
	t.Fatal("no lease up to 2.4 s was renewed in time (see the gaps logged): a watchdog that renews too " +
		"seldom, or a machine that never ran it")
}

// holdShortLease holds a lock with a lease of timeout for eight leases while another Locker waits
// for it, and checks the lock held throughout. It returns false, having checked nothing, if the
// holder's calls were too late for the lease to be kept, with the longest gap between them.
func holdShortLease(t *testing.T, s *redistest.Server, timeout time.Duration) (time.Duration, bool) {
	key := fmt.Sprint("job-", timeout.Milliseconds())
	calls := &scriptTimes{}
	holder := newClient(t, s)
	holder.AddHook(calls)
	a := New(holder, WithWatchdogTimeout(timeout))
	b := newLocker(t, s, WithWatchdogTimeout(timeout))
	la := tryLockPatiently(t, a, key)
	ctx, cancel := context.WithTimeout(context.Background(), 8*timeout)
	defer cancel()
	lb, waitErr := b.Lock(ctx, key)
	lost := isClosed(la.Lost())
	pttlSent := time.Now()
	ttl := newClient(t, s).PTTL(context.Background(), lockKey(key)).Val()
	if gap := calls.longestGap(pttlSent, time.Now()); gap >= timeout-5*time.Millisecond {
		if lb != nil {
			_ = lb.Unlock(context.Background())
		}
		_ = la.Unlock(context.Background())
		return gap, false
	}
	if !errors.Is(waitErr, context.DeadlineExceeded) {
		t.Fatalf("waiter got the lock (%v, %v) while the watchdog renewed it in time", lb, waitErr)
	}
	if lost {
		t.Fatal("Lost closed while the lock was renewed in time")
	}
	if ttl <= 0 || ttl > timeout {
		t.Fatalf("PTTL = %v, want within (0, %v]", ttl, timeout)
	}
	if err := la.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	a.dog.mu.Lock()
	defer a.dog.mu.Unlock()
	if n := len(a.dog.mu.entries); n != 0 {
		t.Fatalf("%d watchdog entries after Unlock", n)
	}
	return 0, true
}

// scriptTimes is a client hook that records when each successful script call (EVAL or EVALSHA, alone
// or in a pipeline of them) was sent and answered: a call reached Redis between the two.
type scriptTimes struct {
	mu    sync.Mutex
	spans []struct{ sent, answered time.Time }
}

func (c *scriptTimes) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *scriptTimes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		sent := time.Now()
		err := next(ctx, cmd)
		c.record(sent, err, cmd)
		return err
	}
}

func (c *scriptTimes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		sent := time.Now()
		err := next(ctx, cmds)
		c.record(sent, err, cmds...)
		return err
	}
}

func (c *scriptTimes) record(sent time.Time, err error, cmds ...redis.Cmder) {
	answered := time.Now()
	if err != nil {
		return
	}
	for _, cmd := range cmds {
		if name := cmd.Name(); (name != "eval" && name != "evalsha") || cmd.Err() != nil {
			return
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.spans = append(c.spans, struct{ sent, answered time.Time }{sent, answered})
}

// longestGap returns the longest time that may have passed at Redis between two successive calls
// recorded, and between the last one and a check sent at checkSent and answered at checkAnswered:
// each reached Redis between its sending and its answer, so the gap is at most the time from the
// earlier one's sending to the later one's answer. A key that each call sets or extends to live
// for a lease longer than that (by the few milliseconds of Redis's rounding) never expired before
// the check. Only calls answered before the check was sent count.
func (c *scriptTimes) longestGap(checkSent, checkAnswered time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	var gap time.Duration
	last := -1
	for i, sp := range c.spans {
		if !sp.answered.Before(checkSent) {
			break
		}
		if i > 0 {
			gap = max(gap, sp.answered.Sub(c.spans[i-1].sent))
		}
		last = i
	}
	if last < 0 {
		return time.Duration(math.MaxInt64) // no call at all: nothing holds the key
	}
	return max(gap, checkAnswered.Sub(c.spans[last].sent))
}

func TestLostWhenKeyDeleted(t *testing.T) {
	s := redistest.Start(t)
	l := newLocker(t, s, WithWatchdogTimeout(150*time.Millisecond))
	ctx := context.Background()
	// A short lease: a reply slower than it fails the acquisition (ErrSlowReply), which is tried again.
	lk := tryLockPatiently(t, l, "job")
	if err := newClient(t, s).Del(ctx, lockKey("job")).Err(); err != nil {
		t.Fatal(err)
	}
	waitClosed(t, lk.Lost(), time.Minute, "Lost after the key was deleted")
	if err := lk.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock of a lost lock: err = %v, want ErrNotHeld", err)
	}
	if err := lk.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("second Unlock of a lost lock: err = %v, want ErrNotHeld", err)
	}
}

func TestLostWhenKeyTakenOver(t *testing.T) {
	s := redistest.Start(t)
	a := newLocker(t, s, WithWatchdogTimeout(150*time.Millisecond))
	b := newLocker(t, s)
	ctx := context.Background()
	// A short lease: a reply slower than it fails the acquisition (ErrSlowReply), which is tried again.
	la := tryLockPatiently(t, a, "job")
	// Another acquisition takes the key over between two renewals, as after a lease ran out.
	rdb := newClient(t, s)
	if err := rdb.Del(ctx, lockKey("job")).Err(); err != nil {
		t.Fatal(err)
	}
	lb, err := b.TryLock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	waitClosed(t, la.Lost(), time.Minute, "Lost after another acquisition took the key")
	if isClosed(lb.Lost()) {
		t.Fatal("the new holder's Lost closed")
	}
	if err := la.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock of the old acquisition: err = %v, want ErrNotHeld", err)
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatalf("the old holder's Unlock must not free the new holder's lock: %v", err)
	}
}

func TestLostWhenRedisRestarts(t *testing.T) {
	s := redistest.Start(t)
	l := newLocker(t, s, WithWatchdogTimeout(300*time.Millisecond))
	ctx := context.Background()
	lk, err := l.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	s.Restart()
	waitClosed(t, lk.Lost(), time.Minute, "Lost after Redis restarted without persistence")
	// The restarted Redis lost the script cache too: acquisition and release must still work.
	lk2, err := l.TryLock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := lk2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func TestFixedLease(t *testing.T) {
	s := redistest.Start(t)
	const lease = 200 * time.Millisecond
	a := newLocker(t, s, WithWatchdogTimeout(time.Minute))
	b := newLocker(t, s)
	ctx := context.Background()
	start := time.Now()
	// A short lease: a reply slower than it fails the acquisition (ErrSlowReply), which is tried again.
	la := tryLockPatiently(t, a, "job", WithLease(lease))
	// The key lives for the lease, not for the watchdog's minute. On a loaded machine the lease can
	// be over before PTTL is read (-2: no key), which tells the same once the lease has had its time.
	switch ttl := newClient(t, s).PTTL(ctx, lockKey("job")).Val(); {
	case ttl > 0 && ttl <= lease:
	case ttl == -2 && time.Since(start) >= lease:
	default:
		t.Fatalf("PTTL = %v %v after the lock was asked for; want within (0, %v], or no key once the lease is over",
			ttl, time.Since(start), lease)
	}
	// The waiter gets the lock when the lease ends, by its fallback timer: nobody renews it.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lb, err := b.Lock(wctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < lease {
		t.Fatalf("acquired %v after a %v lease was taken", d, lease)
	}
	waitClosed(t, la.Lost(), time.Second, "Lost at the end of a fixed lease")
	if err := la.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock after the lease ended: err = %v, want ErrNotHeld", err)
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := a.dog.count(); n != 0 {
		t.Fatalf("the watchdog holds %d entries for a fixed lease", n)
	}
}

func TestReentrancy(t *testing.T) {
	s := redistest.Start(t)
	a, b := newLocker(t, s), newLocker(t, s)
	ctx := context.Background()
	rdb := newClient(t, s)
	first, err := a.TryLock(ctx, "job", WithOwner("worker-1"))
	if err != nil {
		t.Fatal(err)
	}
	// The same owner from another Locker (another process) is the same owner.
	second, err := b.Lock(ctx, "job", WithOwner("worker-1"))
	if err != nil {
		t.Fatal(err)
	}
	if first.Token() != second.Token() {
		t.Fatalf("reentrant acquisition token %d, want the holder's %d", second.Token(), first.Token())
	}
	if got := rdb.HGet(ctx, lockKey("job"), "count").Val(); got != "2" {
		t.Fatalf("count = %q after two holds, want 2", got)
	}
	if _, err := b.TryLock(ctx, "job", WithOwner("worker-2")); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("another owner: err = %v, want ErrNotAcquired", err)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryLock(ctx, "job", WithOwner("worker-2")); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("after one of two unlocks: err = %v, want ErrNotAcquired", err)
	}
	if err := second.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	third, err := b.TryLock(ctx, "job", WithOwner("worker-2"))
	if err != nil {
		t.Fatalf("after as many unlocks as locks: %v", err)
	}
	if third.Token() <= first.Token() {
		t.Fatalf("token %d after release, want > %d", third.Token(), first.Token())
	}
}

// TestReentrancySameLocker checks that holds of one owner in one Locker share a watchdog entry that
// lives until the last of them is unlocked.
func TestReentrancySameLocker(t *testing.T) {
	s := redistest.Start(t)
	l := newLocker(t, s)
	ctx := context.Background()
	x, err := l.Lock(ctx, "job", WithOwner("me"))
	if err != nil {
		t.Fatal(err)
	}
	y, err := l.Lock(ctx, "job", WithOwner("me"))
	if err != nil {
		t.Fatal(err)
	}
	if n := l.dog.count(); n != 1 {
		t.Fatalf("%d watchdog entries for two holds of one acquisition, want 1", n)
	}
	if err := x.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := l.dog.count(); n != 1 {
		t.Fatalf("%d watchdog entries with one hold left, want 1", n)
	}
	if err := y.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if n := l.dog.count(); n != 0 {
		t.Fatalf("%d watchdog entries after the last unlock, want 0", n)
	}
}

func TestFencingTokensIncrease(t *testing.T) {
	s := redistest.Start(t)
	ls := []*Locker{newLocker(t, s), newLocker(t, s), newLocker(t, s)}
	ctx := context.Background()
	var last int64
	for i := range 30 {
		l := ls[i%len(ls)]
		var lk *Lock
		var err error
		if i%2 == 0 {
			lk, err = l.TryLock(ctx, "fenced", WithLease(time.Minute))
		} else {
			lk, err = l.Lock(ctx, "fenced")
		}
		if err != nil {
			t.Fatal(err)
		}
		if lk.Token() <= last {
			t.Fatalf("acquisition %d: token %d, want > %d", i, lk.Token(), last)
		}
		last = lk.Token()
		if i%3 == 0 {
			// Lose it instead of releasing it: the next token must still be higher.
			if err := newClient(t, s).Del(ctx, lockKey("fenced")).Err(); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// The first token of a name is Redis's clock in microseconds.
	rdb := newClient(t, s)
	before := rdb.Time(ctx).Val().UnixMicro()
	other, err := ls[0].TryLock(ctx, "other")
	if err != nil {
		t.Fatal(err)
	}
	after := rdb.Time(ctx).Val().UnixMicro()
	if other.Token() < before || other.Token() > after {
		t.Fatalf("first token of a new name = %d, want Redis's clock in µs, within [%d, %d]", other.Token(), before, after)
	}
}

func TestUnlockIsIdempotent(t *testing.T) {
	s := redistest.Start(t)
	l := newLocker(t, s)
	ctx := context.Background()
	rdb := newClient(t, s)

	t.Run("twice", func(t *testing.T) {
		lk, err := l.Lock(ctx, "twice")
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			if err := lk.Unlock(ctx); err != nil {
				t.Fatalf("Unlock #%d: %v", i+1, err)
			}
		}
	})

	// A release that reached Redis but whose reply was lost: the retry must report success, and
	// must not remove another hold.
	release := func(lk *Lock) {
		t.Helper()
		err := releaseScript.Run(ctx, rdb, []string{lk.key, fenceKey(lk.name)}, lk.token, lk.hold, channelName(lk.name), lk.owner).Err()
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Run("retry after the last hold", func(t *testing.T) {
		lk, err := l.Lock(ctx, "retry-last")
		if err != nil {
			t.Fatal(err)
		}
		release(lk)
		if err := lk.Unlock(ctx); err != nil {
			t.Fatalf("Unlock after its release reached Redis: %v", err)
		}
	})
	t.Run("retry with holds left", func(t *testing.T) {
		x, err := l.Lock(ctx, "retry-held", WithOwner("me"))
		if err != nil {
			t.Fatal(err)
		}
		y, err := l.Lock(ctx, "retry-held", WithOwner("me"))
		if err != nil {
			t.Fatal(err)
		}
		release(x)
		if err := x.Unlock(ctx); err != nil {
			t.Fatalf("Unlock after its release reached Redis: %v", err)
		}
		if got := rdb.HGet(ctx, lockKey("retry-held"), "count").Val(); got != "1" {
			t.Fatalf("count = %q, want 1: a retried release removed another hold", got)
		}
		if err := y.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if n := rdb.Exists(ctx, lockKey("retry-held")).Val(); n != 0 {
			t.Fatal("lock still exists after every hold was released")
		}
	})
	t.Run("retried acquire counts once", func(t *testing.T) {
		c := &lockConfig{owner: "me", hold: "hold:fixed"}
		for range 2 {
			if _, _, err := l.acquire(ctx, "retry-acquire", c); err != nil {
				t.Fatal(err)
			}
		}
		if got := rdb.HGet(ctx, lockKey("retry-acquire"), "count").Val(); got != "1" {
			t.Fatalf("count = %q after a retried acquire, want 1", got)
		}
	})
}

func TestInvalidArguments(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	good := newLocker(t, s)
	cases := []struct {
		name string
		l    *Locker
		lock string
		opts []LockOption
		want error
	}{
		{"empty name", good, "", nil, ErrInvalidName},
		{"closing brace", good, "a}b", nil, ErrInvalidName},
		{"zero lease", good, "x", []LockOption{WithLease(0)}, ErrInvalidOption},
		{"negative lease", good, "x", []LockOption{WithLease(-time.Second)}, ErrInvalidOption},
		{"lease below MinLease", good, "x", []LockOption{WithLease(MinLease - time.Millisecond)}, ErrInvalidOption},
		{"empty owner", good, "x", []LockOption{WithOwner("")}, ErrInvalidOption},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if _, err := c.l.TryLock(ctx, c.lock, c.opts...); !errors.Is(err, c.want) {
				t.Errorf("TryLock: err = %v, want %v", err, c.want)
			}
			if _, err := c.l.Lock(ctx, c.lock, c.opts...); !errors.Is(err, c.want) {
				t.Errorf("Lock: err = %v, want %v", err, c.want)
			}
		})
	}
	if _, err := good.TryLock(ctx, "a{b"); err != nil {
		t.Errorf("a name with '{' is valid: %v", err)
	}
}

func TestForeignKeyIsAnError(t *testing.T) {
	s := redistest.Start(t)
	l := newLocker(t, s)
	ctx := context.Background()
	if err := newClient(t, s).Set(ctx, lockKey("job"), "not a hash", 0).Err(); err != nil {
		t.Fatal(err)
	}
	_, err := l.TryLock(ctx, "job")
	if err == nil || errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock over a string key: err = %v, want Redis's WRONGTYPE", err)
	}
	t.Log(err)
}

func TestWheelStopped(t *testing.T) {
	s := redistest.Start(t)
	l := newLocker(t, s)
	l.wheel.Stop()
	ctx := context.Background()
	if _, err := l.TryLock(ctx, "job"); err == nil {
		t.Fatal("TryLock with a stopped wheel succeeded")
	}
	if n := newClient(t, s).Exists(ctx, lockKey("job")).Val(); n != 0 {
		t.Fatal("a lock that cannot be renewed was left held")
	}
}

// TestUnlockNotHeldWhenTokenReusedAfterRestart unlocks an acquisition from before a Redis restart
// whose token a new acquisition got since: the old holder must learn that it lost the lock, and the
// new holder must keep it.
func TestUnlockNotHeldWhenTokenReusedAfterRestart(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	old, lb := reuseTokenAfterRestart(t, s, newLocker(t, s), newLocker(t, s), "job")
	if err := old.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock of the acquisition from before the restart: err = %v, want ErrNotHeld", err)
	}
	if !isClosed(old.Lost()) {
		t.Fatal("Lost not closed by an Unlock that found the lock gone")
	}
	if err := lb.Unlock(ctx); err != nil {
		t.Fatalf("the new holder's Unlock: %v", err)
	}
}

// TestNewPanicsOnInvalidOption checks that New reports what can only be a bug in the caller at
// once, naming the option, rather than from every later Lock.
func TestNewPanicsOnInvalidOption(t *testing.T) {
	s := redistest.Start(t)
	cases := []struct {
		name string
		new  func()
		want string
	}{
		{"nil client", func() { New(nil) }, "nil Redis client"},
		{"short watchdog", func() { newLocker(t, s, WithWatchdogTimeout(time.Millisecond)) }, "WithWatchdogTimeout(1ms)"},
		{"zero watchdog", func() { newLocker(t, s, WithWatchdogTimeout(0)) }, "WithWatchdogTimeout(0s)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			defer func() {
				r := recover()
				err, ok := r.(error)
				if !ok || !errors.Is(err, ErrInvalidOption) || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("New panicked with %v, want an error wrapping ErrInvalidOption naming %s", r, c.want)
				}
			}()
			c.new()
		})
	}
	// The shortest timeout accepted is accepted.
	newLocker(t, s, WithWatchdogTimeout(MinWatchdogTimeout))
}

// TestNilOptionsAreIgnored passes nil options, as a caller that builds its option list
// conditionally might, and nil arguments to options, which mean the option's default.
func TestNilOptionsAreIgnored(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	l := newLocker(t, s, nil, WithWheel(nil), WithLogger(nil))
	if l.wheel == nil || l.logger != slog.Default() {
		t.Fatalf("WithWheel(nil), WithLogger(nil): wheel %v, logger %v; want a wheel of its own and slog.Default()", l.wheel, l.logger)
	}
	lk, err := l.TryLock(ctx, "job", nil)
	if err != nil {
		t.Fatalf("TryLock with a nil LockOption: %v", err)
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lk, err = l.Lock(ctx, "job", WithOwner("w"), nil)
	if err != nil {
		t.Fatalf("Lock with a nil LockOption: %v", err)
	}
	if lk.Owner() != "w" {
		t.Fatalf("owner %q, want w", lk.Owner())
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLostNotClosedByRenewalRacingUnlock runs a renewal round between the moment Unlock's release
// freed the lock in Redis and the moment Unlock takes the lock off the watchdog. The round finds the
// key gone, but the lock was released, not lost: Lost must stay open, as after any successful Unlock.
func TestLostNotClosedByRenewalRacingUnlock(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	l := newLocker(t, s)
	lk, err := l.TryLock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	l.testHookUnlock = func() {
		l.dog.running.Store(true)
		l.dog.round()
	}
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if isClosed(lk.Lost()) {
		t.Fatal("Lost closed by a renewal that ran while a successful Unlock was in flight")
	}
	if n := l.dog.count(); n != 0 {
		t.Fatalf("%d watchdog entries after Unlock", n)
	}

	// An Unlock that fails while the watchdog finds the lock gone must still report the loss.
	lk, err = l.TryLock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := newClient(t, s).Del(ctx, lockKey("job")).Err(); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := lk.Unlock(cctx); err == nil || errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock with a canceled context: err = %v, want the context's error", err)
	}
	if !isClosed(lk.Lost()) {
		t.Fatal("Lost not closed although the watchdog found the key gone while Unlock failed")
	}
	if err := lk.Unlock(ctx); !errors.Is(err, ErrNotHeld) {
		t.Fatalf("Unlock retried: err = %v, want ErrNotHeld", err)
	}
}
