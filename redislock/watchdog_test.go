package redislock

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/internal/rediskit"
	"github.com/tockwheel/tock/internal/redistest"
)

// The tests in this file run the watchdog in synctest bubbles: the wheel, the Locker and the client
// live in the bubble, so the watchdog's schedule runs on the bubble's fake clock and is checked
// exactly, while Redis itself runs in real time (which barely advances). So these tests check what
// the watchdog does and when; the tests in lock_test.go check that leases hold in real time.

const bubbleTimeout = 30 * time.Second // the default, to show the schedule at its real scale

// quiet discards the renewal-failure warnings the tests provoke.
var quiet = WithLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))

// bubbleLocker returns a Locker made in the calling bubble, with a wheel and a client of its own
// that are closed when the bubble's test ends. The client logs in as the user "locker", whose
// scripting permission failRenewals takes away.
func bubbleLocker(t *testing.T, s *redistest.Server, admin *redis.Client) *Locker {
	err := admin.Do(context.Background(), "ACL", "SETUSER", "locker", "reset", "on", "nopass", "~*", "&*", "+@all").Err()
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Username: "locker", Password: "any"})
	w := tock.New()
	t.Cleanup(func() {
		// A wheel's driver sleeps until the deadline of its last timer even if that timer was
		// stopped; stopping the wheel ends it. A client that failed to dial keeps a goroutine that
		// retries every second until it sees the client closed.
		w.Stop()
		rdb.Close()
		time.Sleep(time.Minute)
	})
	// Load the scripts, so that calls are counted as in a steady state, without a first NOSCRIPT.
	for _, sc := range []*redis.Script{acquireScript, releaseScript, renewScript} {
		if err := sc.Load(context.Background(), rdb).Err(); err != nil {
			t.Fatal(err)
		}
	}
	return New(rdb, WithWheel(w), WithWatchdogTimeout(bubbleTimeout), quiet)
}

// failRenewals makes Redis refuse the Locker's scripts while keeping its data: an outage the
// watchdog must ride out.
func failRenewals(t *testing.T, admin *redis.Client, fail bool) {
	t.Helper()
	perm := []any{"+evalsha", "+eval"}
	if fail {
		perm = []any{"-evalsha", "-eval"}
	}
	if err := admin.Do(context.Background(), append([]any{"ACL", "SETUSER", "locker"}, perm...)...).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestWatchdogSchedule holds locks for ten leases and counts the renewal calls Redis received: one
// per timeout/3, for all locks together.
func TestWatchdogSchedule(t *testing.T) {
	s := redistest.Start(t)
	admin := newClient(t, s)
	synctest.Test(t, func(t *testing.T) {
		l := bubbleLocker(t, s, admin)
		ctx := context.Background()
		var locks []*Lock
		for i := range 10 {
			lk, err := l.Lock(ctx, fmt.Sprint("job-", i))
			if err != nil {
				t.Fatal(err)
			}
			locks = append(locks, lk)
		}
		before := scriptCalls(t, admin)
		time.Sleep(10*bubbleTimeout + bubbleTimeout/6)
		synctest.Wait()
		calls := scriptCalls(t, admin) - before
		if calls != 30 {
			t.Fatalf("%d renewal calls in 10 leases for 10 locks, want 30: one per period", calls)
		}
		for _, lk := range locks {
			if isClosed(lk.Lost()) {
				t.Fatal("Lost closed while renewals succeeded")
			}
			if err := lk.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		if n := l.dog.count(); n != 0 {
			t.Fatalf("%d watchdog entries after every lock was unlocked", n)
		}
		if l.wheel.Pending() != 0 {
			t.Fatalf("%d timers pending after every lock was unlocked", l.wheel.Pending())
		}
	})
}

// TestWatchdogRetriesUntilRecovery fails renewals for most of a lease and checks that the watchdog
// retries every timeout/12 and that the lock survives once Redis recovers.
func TestWatchdogRetriesUntilRecovery(t *testing.T) {
	s := redistest.Start(t)
	admin := newClient(t, s)
	synctest.Test(t, func(t *testing.T) {
		l := bubbleLocker(t, s, admin)
		ctx := context.Background()
		lk, err := l.Lock(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		failRenewals(t, admin, true)
		before := scriptCalls(t, admin)
		// The first round fails at timeout/3 = 10 s; retries follow every timeout/12 = 2.5 s. The
		// last before the lease ends at 30 s is at 27.5 s: recover just before it.
		time.Sleep(bubbleTimeout - bubbleTimeout/12 - bubbleTimeout/24)
		synctest.Wait()
		calls := scriptCalls(t, admin) - before
		failRenewals(t, admin, false)
		// Attempts at 10, 12.5, 15, 17.5, 20, 22.5 and 25 s.
		if calls != 7 {
			t.Fatalf("%d renewal attempts during the outage, want 7", calls)
		}
		if isClosed(lk.Lost()) {
			t.Fatal("Lost closed before the lease ran out")
		}
		time.Sleep(bubbleTimeout / 12)
		synctest.Wait()
		if isClosed(lk.Lost()) {
			t.Fatal("Lost closed although the retry before the lease's end succeeded")
		}
		time.Sleep(3 * bubbleTimeout)
		synctest.Wait()
		if isClosed(lk.Lost()) {
			t.Fatal("Lost closed after Redis recovered")
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestWatchdogLostAtLeaseEnd fails every renewal and checks that Lost closes exactly a safety margin
// before the lease that was last confirmed ends, not a tick later, and not before.
func TestWatchdogLostAtLeaseEnd(t *testing.T) {
	s := redistest.Start(t)
	admin := newClient(t, s)
	for _, outage := range []struct {
		name  string
		start func()
		end   func()
	}{
		{"scripts refused", func() { failRenewals(t, admin, true) }, func() { failRenewals(t, admin, false) }},
		{"server down", s.Stop, s.Restart},
	} {
		t.Run(outage.name, func(t *testing.T) {
			// Restart starts processes and goroutines, which must not join the bubble.
			defer outage.end()
			synctest.Test(t, func(t *testing.T) {
				l := bubbleLocker(t, s, admin)
				ctx := context.Background()
				lk, err := l.Lock(ctx, outage.name)
				if err != nil {
					t.Fatal(err)
				}
				// One successful renewal, at timeout/3, pushes the deadline to 4/3 timeout.
				time.Sleep(bubbleTimeout/3 + time.Millisecond)
				synctest.Wait()
				start := time.Now()
				outage.start()
				select {
				case <-lk.Lost():
				case <-time.After(2 * bubbleTimeout):
					t.Fatal("Lost not closed two leases into the outage")
				}
				lost := time.Since(start)
				want := bubbleTimeout - time.Millisecond - lostMargin(bubbleTimeout)
				if lost < want || lost > want+tock.DefaultTick {
					t.Fatalf("Lost closed %v after the outage began, want %v (the end of the renewed lease less the safety margin)", lost, want)
				}
				if n := l.dog.count(); n != 0 {
					t.Fatalf("%d watchdog entries after the lock was lost", n)
				}
			})
		})
	}
}

// TestWatchdogBatches renews 600 locks in one round and checks that it took three script calls.
func TestWatchdogBatches(t *testing.T) {
	s := redistest.Start(t)
	admin := newClient(t, s)
	l := newLocker(t, s)
	ctx := context.Background()
	const n = 600
	for i := range n {
		if _, err := l.TryLock(ctx, fmt.Sprint("job-", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Shorten the leases in Redis, so that a renewal is visible.
	for i := range n {
		admin.PExpire(ctx, lockKey(fmt.Sprint("job-", i)), 10*time.Second)
	}
	if err := renewScript.Load(ctx, admin).Err(); err != nil {
		t.Fatal(err)
	}
	before := scriptCalls(t, admin)
	l.dog.running.Store(true)
	l.dog.round()
	if calls := scriptCalls(t, admin) - before; calls != 3 {
		t.Fatalf("%d script calls to renew %d locks, want 3", calls, n)
	}
	for i := range n {
		if ttl := admin.PTTL(ctx, lockKey(fmt.Sprint("job-", i))).Val(); ttl <= 10*time.Second {
			t.Fatalf("lock %d not renewed: PTTL %v", i, ttl)
		}
	}
}

// TestWatchdogAfterScriptFlush checks that renewals survive Redis forgetting the script.
func TestWatchdogAfterScriptFlush(t *testing.T) {
	s := redistest.Start(t)
	admin := newClient(t, s)
	l := newLocker(t, s)
	ctx := context.Background()
	lk, err := l.TryLock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	admin.PExpire(ctx, lockKey("job"), 10*time.Second)
	l.dog.running.Store(true)
	l.dog.round()
	if ttl := admin.PTTL(ctx, lockKey("job")).Val(); ttl <= 10*time.Second {
		t.Fatalf("not renewed after SCRIPT FLUSH: PTTL %v", ttl)
	}
	if isClosed(lk.Lost()) {
		t.Fatal("Lost closed")
	}
}

func TestBatchGroupsByClusterSlot(t *testing.T) {
	l := &Locker{timeout: time.Second, group: func(key string) string { return fmt.Sprint(rediskit.Slot(key)) }}
	l.dog.init(l)
	var es []*entry
	// 300 keys of one slot (names sharing a hash tag prefix is impossible, so use the same name with
	// different tokens) and single keys of other slots.
	for i := range 300 {
		es = append(es, &entry{key: lockKey("same"), token: int64(i)})
	}
	for i := range 5 {
		es = append(es, &entry{key: lockKey(fmt.Sprint("other-", i))})
	}
	batches := l.dog.batch(es)
	total := 0
	for _, b := range batches {
		if len(b) == 0 || len(b) > renewBatchSize {
			t.Fatalf("batch of %d keys", len(b))
		}
		slot := rediskit.Slot(b[0].key)
		for _, e := range b {
			if rediskit.Slot(e.key) != slot {
				t.Fatalf("batch mixes slots %d and %d", slot, rediskit.Slot(e.key))
			}
		}
		total += len(b)
	}
	if total != len(es) {
		t.Fatalf("batches hold %d keys, want %d", total, len(es))
	}
	if want := 2 + distinctSlots(5); len(batches) != want {
		t.Fatalf("%d batches, want %d", len(batches), want)
	}
}

func distinctSlots(n int) int {
	seen := map[int]bool{rediskit.Slot(lockKey("same")): true}
	for i := range n {
		seen[rediskit.Slot(lockKey(fmt.Sprint("other-", i)))] = true
	}
	return len(seen) - 1
}

// TestRenewalIgnoresTokenReusedAfterRestart restarts Redis without persistence and makes a new
// acquisition get the token the old holder had (see reuseTokenAfterRestart). The old holder's next
// renewal must find the lock gone rather than renew the new holder's lease: otherwise both hold it.
func TestRenewalIgnoresTokenReusedAfterRestart(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	a := newLocker(t, s)
	// The new holders: one through another Locker, one through the old holder's own Locker.
	old, other := reuseTokenAfterRestart(t, s, a, newLocker(t, s), "job")
	if err := other.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	setNextToken(t, newClient(t, s), "job", old.Token())
	same, err := a.TryLock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if same.Token() != old.Token() {
		t.Fatalf("token %d, want the reused %d", same.Token(), old.Token())
	}
	a.dog.running.Store(true)
	a.dog.round()
	if !isClosed(old.Lost()) {
		t.Fatal("the holder from before the restart renewed the lock of a new acquisition with its token")
	}
	if isClosed(same.Lost()) {
		t.Fatal("the new holder's Lost closed")
	}
	if err := same.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestRenewalNeverShortensLease holds a lock with a long fixed lease and, reentrantly, with the
// watchdog. A renewal must not cut the fixed lease down to the watchdog timeout: once the watchdog
// hold is unlocked, the key would expire long before the fixed-lease holder's Lost closes, and
// another owner could take the lock while it still believes it holds it.
func TestRenewalNeverShortensLease(t *testing.T) {
	s := redistest.Start(t)
	ctx := context.Background()
	const timeout, lease = time.Second, time.Minute
	l := newLocker(t, s, WithWatchdogTimeout(timeout))
	fixed, err := l.TryLock(ctx, "job", WithOwner("w"), WithLease(lease))
	if err != nil {
		t.Fatal(err)
	}
	dog, err := l.TryLock(ctx, "job", WithOwner("w"))
	if err != nil {
		t.Fatal(err)
	}
	l.dog.running.Store(true)
	l.dog.round()
	if isClosed(dog.Lost()) {
		t.Fatal("the watchdog hold was lost")
	}
	if err := dog.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if ttl := newClient(t, s).PTTL(ctx, lockKey("job")).Val(); ttl <= timeout {
		t.Fatalf("PTTL %v after a renewal, want the fixed lease of %v kept", ttl, lease)
	}
	if err := fixed.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestWatchdogRenewsShortLeaseAtOnce adds a lock whose acquisition was slow, so that less than a
// renewal period is left of its lease: the watchdog must renew it at once rather than at the next
// period, which would come after the lease ended.
func TestWatchdogRenewsShortLeaseAtOnce(t *testing.T) {
	s := redistest.Start(t)
	admin := newClient(t, s)
	synctest.Test(t, func(t *testing.T) {
		l := bubbleLocker(t, s, admin)
		ctx := context.Background()
		lk, err := l.TryLock(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		// As if the reply had taken three quarters of the lease.
		l.dog.remove(lk)
		before := scriptCalls(t, admin)
		if err := l.dog.add(lk, time.Now().Add(bubbleTimeout/4)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if calls := scriptCalls(t, admin) - before; calls != 1 {
			t.Fatalf("%d renewal calls right after adding a lock with a quarter of its lease left, want 1", calls)
		}
		if isClosed(lk.Lost()) {
			t.Fatal("Lost closed")
		}
		if got := time.Until(l.dog.lostAt(lk.entry)); got != bubbleTimeout-lostMargin(bubbleTimeout) {
			t.Fatalf("lease left after the renewal %v, want a whole one", got)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// TestClientClosedLosesLocks closes the Locker's client while it holds a lock: nothing can renew
// it any more, so the next round must declare it lost rather than retry until its lease ends.
func TestClientClosedLosesLocks(t *testing.T) {
	s := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	l := New(rdb, quiet)
	lk, err := l.TryLock(context.Background(), "job")
	if err != nil {
		t.Fatal(err)
	}
	rdb.Close()
	l.dog.running.Store(true)
	l.dog.round()
	if !isClosed(lk.Lost()) {
		t.Fatal("Lost still open after a round found the client closed")
	}
	if n := l.dog.count(); n != 0 {
		t.Fatalf("%d watchdog entries after the client was closed", n)
	}
}
