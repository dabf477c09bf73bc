package redislock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/internal/redistest"
)

// TestLostClosedBeforeAnotherOwnerAcquires checks the promise that Lost closes no later than Redis
// frees the key, the way it was found broken: another owner tries for the lock from shortly before
// the holder's lease ends until it gets it, and the holder's Lost must be closed by then. The lease
// runs out three ways: a fixed lease, a watchdog lease whose renewals Redis refuses, and a fixed
// lease that ends while Redis is paused, so that the contender's try, queued meanwhile, runs the
// moment Redis resumes.
func TestLostClosedBeforeAnotherOwnerAcquires(t *testing.T) {
	s := redistest.Start(t)
	admin := newClient(t, s)
	const lease, runs = 40 * time.Millisecond, 25
	contender := newLocker(t, s)
	cases := []struct {
		name string
		// hold acquires name and arranges for the lease to run out about lease from now.
		hold func(t *testing.T, name string) *Lock
		// during runs while the contender tries, from shortly before the lease ends.
		during func()
	}{
		{"fixed lease", func(t *testing.T, name string) *Lock {
			lk, err := newLocker(t, s).TryLock(context.Background(), name, WithLease(lease))
			if err != nil {
				t.Fatal(err)
			}
			return lk
		}, nil},
		{"watchdog renewals refused", func(t *testing.T, name string) *Lock {
			l := New(userClient(t, s, admin, name), WithWatchdogTimeout(lease), quiet)
			lk, err := l.TryLock(context.Background(), name)
			if err != nil {
				t.Fatal(err)
			}
			refuseScripts(t, admin, name)
			return lk
		}, nil},
		{"Redis paused across the lease's end", func(t *testing.T, name string) *Lock {
			lk, err := newLocker(t, s).TryLock(context.Background(), name, WithLease(lease))
			if err != nil {
				t.Fatal(err)
			}
			return lk
		}, func() {
			s.Pause()
			time.Sleep(10 * time.Millisecond)
			s.Resume()
		}},
	}
	for ci, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			late := 0
			for i := range runs {
				name := fmt.Sprintf("case%d-run%d", ci, i)
				held := c.hold(t, name)
				time.Sleep(lease - 5*time.Millisecond)
				if c.during != nil {
					go c.during()
				}
				var lk *Lock
				for lk == nil {
					var err error
					if lk, err = contender.TryLock(ctx, name); err != nil && !errors.Is(err, ErrNotAcquired) {
						t.Fatal(err)
					}
				}
				if !isClosed(held.Lost()) {
					late++
				}
				if err := lk.Unlock(ctx); err != nil {
					t.Fatal(err)
				}
			}
			if late > 0 {
				t.Fatalf("in %d of %d runs another owner acquired the lock while the holder's Lost was open", late, runs)
			}
		})
	}
}

// userClient returns a client that logs in as a Redis user of its own, named user, with every
// permission, so that refuseScripts can take its scripting away.
func userClient(t *testing.T, s *redistest.Server, admin *redis.Client, user string) *redis.Client {
	t.Helper()
	err := admin.Do(context.Background(), "ACL", "SETUSER", user, "reset", "on", "nopass", "~*", "&*", "+@all").Err()
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Username: user, Password: "any"})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// refuseScripts makes Redis refuse the scripts of user, which keeps its data: renewals fail.
func refuseScripts(t *testing.T, admin *redis.Client, user string) {
	t.Helper()
	if err := admin.Do(context.Background(), "ACL", "SETUSER", user, "-evalsha", "-eval").Err(); err != nil {
		t.Fatal(err)
	}
}

// TestLostTimerFiresBeforeFixedLeaseEnds checks on the bubble's clock that a goroutine blocked on
// Lost's channel since the acquisition is woken exactly a safety margin before a fixed lease ends,
// without anyone calling Lost again.
func TestLostTimerFiresBeforeFixedLeaseEnds(t *testing.T) {
	s := redistest.Start(t)
	admin := newClient(t, s)
	synctest.Test(t, func(t *testing.T) {
		l := bubbleLocker(t, s, admin)
		const lease = 10 * time.Second
		start := time.Now()
		lk, err := l.TryLock(context.Background(), "job", WithLease(lease))
		if err != nil {
			t.Fatal(err)
		}
		lost := lk.Lost()
		want := lease - lostMargin(lease)
		if want != lease-12*time.Millisecond {
			t.Fatalf("margin of a %v lease: %v, want 12ms (2 ms and a thousandth)", lease, lease-want)
		}
		time.Sleep(want - time.Nanosecond)
		synctest.Wait()
		if isClosed(lost) {
			t.Fatalf("Lost closed %v after the acquisition, before %v", time.Since(start), want)
		}
		time.Sleep(tock.DefaultTick)
		synctest.Wait()
		if !isClosed(lost) {
			t.Fatalf("Lost still open %v after the acquisition, %v after %v", time.Since(start), time.Since(start)-want, want)
		}
	})
}
