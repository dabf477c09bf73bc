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
			return tryLockPatiently(t, newLocker(t, s), name, WithLease(lease))
		}, nil},
		{"watchdog renewals refused", func(t *testing.T, name string) *Lock {
			l := New(userClient(t, s, admin, name), WithWatchdogTimeout(lease), quiet)
			lk := tryLockPatiently(t, l, name)
			refuseScripts(t, admin, name)
			return lk
		}, nil},
		{"Redis paused across the lease's end", func(t *testing.T, name string) *Lock {
			return tryLockPatiently(t, newLocker(t, s), name, WithLease(lease))
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

// tryLockPatiently acquires the free lock name, trying again while Redis's answer comes too late
// for the short lease (ErrSlowReply, on a loaded machine): the lock is then not held.
func tryLockPatiently(t *testing.T, l *Locker, name string, opts ...LockOption) *Lock {
	t.Helper()
	for try := 0; ; try++ {
		lk, err := l.TryLock(context.Background(), name, opts...)
		if err == nil {
			return lk
		}
		if !errors.Is(err, ErrSlowReply) || try == 20 {
			t.Fatal(err)
		}
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

// TestNoLockBornLost pauses Redis between the sending of an acquisition and its reply for longer
// than the lease, as a slow network or a stalled Redis would: the Locker must not return a Lock
// whose lease is over (its Lost closed at once while Redis held the key with a fresh lease), and it
// must release what Redis granted, so that other owners are not refused for a whole lease.
func TestNoLockBornLost(t *testing.T) {
	s := redistest.Start(t)
	const lease = 50 * time.Millisecond
	cases := []struct {
		name   string
		locker []Option
		lock   []LockOption
	}{
		{"fixed lease", nil, []LockOption{WithLease(lease)}},
		{"watchdog", []Option{WithWatchdogTimeout(lease)}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			rdb := newClient(t, s)
			l := New(rdb, c.locker...)
			if err := rdb.Ping(ctx).Err(); err != nil { // a pooled connection: the request is sent at once
				t.Fatal(err)
			}
			type result struct {
				lk  *Lock
				err error
			}
			sent := make(chan struct{}, 1)
			rdb.AddHook(sendHook{sent})
			got := make(chan result, 1)
			s.Pause()
			start := time.Now()
			go func() {
				lk, err := l.TryLock(ctx, c.name, c.lock...)
				got <- result{lk, err}
			}()
			<-sent
			time.Sleep(2 * lease)
			s.Resume()
			r := <-got
			if r.err == nil {
				t.Fatalf("TryLock returned a lock %v after the request, with a lease of %v (Lost closed: %v)",
					time.Since(start), lease, isClosed(r.lk.Lost()))
			}
			if !errors.Is(r.err, ErrSlowReply) {
				t.Fatalf("TryLock with a reply after the lease: err = %v, want ErrSlowReply", r.err)
			}
			if _, err := newLocker(t, s).TryLock(ctx, c.name); err != nil {
				t.Fatalf("another owner right after: %v; the late acquisition was not released", err)
			}
		})
	}
}

// sendHook reports on sent, without blocking, each time its client is about to send a command.
type sendHook struct{ sent chan<- struct{} }

func (h sendHook) notify() {
	select {
	case h.sent <- struct{}{}:
	default:
	}
}

func (h sendHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h sendHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.notify()
		return next(ctx, cmd)
	}
}

func (h sendHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.notify()
		return next(ctx, cmds)
	}
}
