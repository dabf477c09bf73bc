package redislock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/internal/redistest"
)

// TestWaitersServedInOrder has three goroutines of one Locker wait for a lock, one after the other,
// and checks that each release wakes the one that has waited longest.
func TestWaitersServedInOrder(t *testing.T) {
	s := redistest.Start(t)
	a, b := newLocker(t, s), newLocker(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	held, err := a.Lock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	waiting := notifyWaits(b, 16)
	order := make(chan int, 3)
	var wg sync.WaitGroup
	defer wg.Wait()
	for i := range 3 {
		wg.Go(func() {
			lk, err := b.Lock(ctx, "job")
			if err != nil {
				t.Error(err)
				order <- -1
				return
			}
			order <- i
			if err := lk.Unlock(ctx); err != nil {
				t.Error(err)
			}
		})
		// Let waiter i queue up before starting the next.
		select {
		case <-waiting:
		case <-ctx.Done():
			t.Fatal("waiter did not start waiting")
		}
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	for want := range 3 {
		if got := <-order; got != want {
			t.Fatalf("waiter %d acquired in turn %d", got, want)
		}
	}
}

// TestSubscriptionLingers checks that the pub/sub connection and a channel's subscription outlive a
// wait, so that the next wait needs no new connection, and that a sweep drops them once idle.
func TestSubscriptionLingers(t *testing.T) {
	s := redistest.Start(t)
	a, b := newLocker(t, s), newLocker(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waiting := notifyWaits(b, 1)
	wait := func() {
		t.Helper()
		held, err := a.Lock(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		got := lockThenUnlock(ctx, b, "job")
		<-waiting
		if err := held.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-got; err != nil {
			t.Fatal(err)
		}
	}
	wait()
	b.sub.mu.Lock()
	ps := b.sub.mu.ps
	b.sub.mu.Unlock()
	if ps == nil {
		t.Fatal("pub/sub connection closed right after the wait")
	}
	wait()
	b.sub.mu.Lock()
	if b.sub.mu.ps != ps {
		t.Fatal("second wait opened a new pub/sub connection")
	}
	for _, tp := range b.sub.mu.topics {
		tp.idleSince = tp.idleSince.Add(-subscriptionLinger)
	}
	b.sub.mu.Unlock()
	b.sub.sweep()
	b.sub.mu.Lock()
	defer b.sub.mu.Unlock()
	if b.sub.mu.ps != nil || len(b.sub.mu.topics) != 0 {
		t.Fatalf("after the linger: ps=%v, %d topics; want none", b.sub.mu.ps, len(b.sub.mu.topics))
	}
}

// TestUnusedWakePassesOn checks that a waiter that leaves with a wake-up it did not act on hands it
// to the next waiter, which would otherwise sleep until its fallback timer.
func TestUnusedWakePassesOn(t *testing.T) {
	var s subscriber
	tp := &topic{confirmed: true}
	s.mu.topics = map[string]*topic{"c": tp}
	var ws []*waiter
	for i := range 2 {
		w := &waiter{wake: make(chan struct{}, 1), channel: fmt.Sprint("c", i*0), t: tp}
		tp.waiters = append(tp.waiters, w)
		ws = append(ws, w)
	}
	ws[0].notify()
	s.leave(ws[0])
	if !isClosedOrReady(ws[1].wake) {
		t.Fatal("the wake-up of a leaving waiter was lost")
	}
}

func isClosedOrReady(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// TestWaiterWokenAfterRedisRestart restarts Redis while a goroutine waits for a lock with a 30 s
// lease: the release is never published, as the restart drops the key, so the waiter must be woken
// by the pub/sub connection's resubscription and find the lock free long before its fallback timer.
func TestWaiterWokenAfterRedisRestart(t *testing.T) {
	s := redistest.Start(t)
	a, b := newLocker(t, s), newLocker(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), DefaultWatchdogTimeout/2)
	defer cancel()
	if _, err := a.Lock(ctx, "job"); err != nil {
		t.Fatal(err)
	}
	waiting := notifyWaits(b, 1)
	got := lockThenUnlock(ctx, b, "job")
	<-waiting
	s.Restart()
	if err := <-got; err != nil {
		t.Fatalf("waiter across a Redis restart: %v", err)
	}
}

// stallingDialer dials Redis, but while stalled, a dial blocks until the stall ends or its context
// does, as a dial to a host whose network dropped the SYN would; it reports each blocked dial.
type stallingDialer struct {
	stalled atomic.Bool
	release chan struct{}
	blocked chan struct{}
}

func newStallingDialer() *stallingDialer {
	return &stallingDialer{release: make(chan struct{}), blocked: make(chan struct{}, 16)}
}

func (d *stallingDialer) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if d.stalled.Load() {
		d.blocked <- struct{}{}
		select {
		case <-d.release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	var nd net.Dialer
	return nd.DialContext(ctx, network, addr)
}

// TestSlowSubscriptionStallsNoOtherLock starts a wait whose pub/sub connection cannot be dialed
// and checks that, meanwhile, a Lock of a free lock through the same Locker returns: it needs no
// pub/sub I/O, so it must not queue behind the subscriber's. The dial stays stalled until that
// Lock has returned, so one that queued behind it would never return (the context ends it).
func TestSlowSubscriptionStallsNoOtherLock(t *testing.T) {
	s := redistest.Start(t)
	d := newStallingDialer()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Dialer: d.dial})
	t.Cleanup(func() { rdb.Close() })
	l := New(rdb)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Pool a few connections, so that the locks below need no dial.
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() { _ = rdb.Ping(ctx).Err() })
	}
	wg.Wait()
	if _, err := newLocker(t, s).TryLock(ctx, "busy"); err != nil {
		t.Fatal(err)
	}

	d.stalled.Store(true)
	waitCtx, stopWaiting := context.WithCancel(ctx)
	waited := make(chan error, 1)
	go func() {
		_, err := l.Lock(waitCtx, "busy")
		waited <- err
	}()
	select {
	case <-d.blocked: // the waiter's pub/sub connection is being dialed
	case <-ctx.Done():
		t.Fatal("the waiter never dialed its pub/sub connection")
	}
	lk, err := l.Lock(ctx, "free")
	if err != nil {
		t.Fatalf("Lock of a free lock while another Lock's subscription is stalled: %v", err)
	}
	close(d.release)
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	stopWaiting()
	if err := <-waited; !errors.Is(err, context.Canceled) {
		t.Fatalf("the stalled waiter: err = %v, want context.Canceled", err)
	}
}

// TestFailedSubscriptionIsReported makes the pub/sub connection impossible to dial: a Lock that
// must wait returns the error rather than wait without a subscription, and a later Lock subscribes
// afresh once Redis is reachable.
func TestFailedSubscriptionIsReported(t *testing.T) {
	s := redistest.Start(t)
	var refuse atomic.Bool
	dialErr := errors.New("dial refused by the test")
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr, Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
		if refuse.Load() {
			return nil, dialErr
		}
		var nd net.Dialer
		return nd.DialContext(ctx, network, addr)
	}})
	t.Cleanup(func() { rdb.Close() })
	l := New(rdb)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	held, err := newLocker(t, s).TryLock(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	refuse.Store(true)
	if _, err := l.Lock(ctx, "busy"); !errors.Is(err, dialErr) {
		t.Fatalf("Lock that cannot subscribe: err = %v, want the dial error", err)
	}
	refuse.Store(false)
	waiting := notifyWaits(l, 1)
	got := lockThenUnlock(ctx, l, "busy")
	waitClosed(t, waiting, time.Minute, "waiter subscribed after the failure")
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatalf("Lock after the connection recovered: %v", err)
	}
}
