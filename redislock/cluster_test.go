package redislock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/internal/rediskit"
	"github.com/tockwheel/tock/internal/redistest"
)

// FuzzLockKeysShareASlot checks that a lock's keys share a slot whatever its name, which is what
// lets its scripts run in Redis Cluster. (rediskit's tests check Slot against Redis itself.)
func FuzzLockKeysShareASlot(f *testing.F) {
	for _, k := range []string{"", "job", "{", "}", "{}", "a{b", "a}b{c}", "{a}{b}", "ünïcödé{ключ}"} {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if rediskit.Slot(lockKey(key)) != rediskit.Slot(fenceKey(key)) && validName(key) {
			t.Fatalf("name %q: lock and fence keys in different slots", key)
		}
	})
}

func validName(name string) bool {
	_, err := (&Locker{}).config(name, nil)
	return err == nil
}

// TestCluster runs locks through a ClusterClient against a one-node Redis Cluster, which rejects a
// script whose keys span slots: renewing hundreds of locks of different slots must still work.
func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{Masters: 1})
	newCluster := func() *redis.ClusterClient {
		rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs()})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	// a's leases are of an hour, so that a waiter's fallback timer, which would wake it when the
	// lease ran out, cannot within the test's minute: the release message must.
	a, b := New(newCluster(), WithWatchdogTimeout(time.Hour)), New(newCluster())
	ctx := context.Background()
	const n = 300
	var held []*Lock
	for i := range n {
		lk, err := a.TryLock(ctx, fmt.Sprint("job-", i))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, lk)
	}
	admin := newCluster()
	for _, lk := range held {
		admin.PExpire(ctx, lk.key, 10*time.Second)
	}
	a.dog.running.Store(true)
	a.dog.round()
	for _, lk := range held {
		if ttl := admin.PTTL(ctx, lk.key).Val(); ttl <= 10*time.Second {
			t.Fatalf("%s not renewed: PTTL %v", lk.key, ttl)
		}
		if isClosed(lk.Lost()) {
			t.Fatalf("%s lost", lk.key)
		}
	}
	if _, err := b.TryLock(ctx, "job-0"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("TryLock of a held lock: err = %v, want ErrNotAcquired", err)
	}
	// A waiter on another client is woken by the release, published through the cluster.
	waiting := notifyWaits(b, 1)
	got := lockThenUnlock(ctx, b, "job-0")
	waitClosed(t, waiting, time.Minute, "waiter subscribed")
	for _, lk := range held {
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("waiter not woken by the release within a minute")
	}
}

// TestClusterRenewsPerMaster holds 600 locks spread over the slots of a 3-master cluster and runs
// one renewal round: it must cost one script call per master (each holds fewer than 256 of them),
// not one per slot, and no call twice (NOSCRIPT, then the source) although it is the Locker's
// first round.
func TestClusterRenewsPerMaster(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, redistest.ClusterConfig{Masters: 3})
	rdb := clusterClient(t, c)
	l := New(rdb)
	ctx := context.Background()
	const n = 600
	var held []*Lock
	for i := range n {
		lk, err := l.TryLock(ctx, fmt.Sprint("job-", i))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, lk)
	}
	for _, lk := range held {
		rdb.PExpire(ctx, lk.key, 10*time.Second) // so that a renewal shows
	}
	var admins []*redis.Client
	for _, m := range c.Masters() {
		admins = append(admins, nodeClient(t, m))
	}
	count := func() (calls, noScript int64) {
		for _, a := range admins {
			calls += scriptCalls(t, a)
			noScript += errorCount(t, a, "NOSCRIPT")
		}
		return calls, noScript
	}
	calls0, noScript0 := count()
	l.dog.running.Store(true)
	l.dog.round()
	calls1, noScript1 := count()
	if calls := calls1 - calls0; calls != 3 {
		t.Errorf("%d script calls to renew %d locks on 3 masters, want 3", calls, n)
	}
	if noScript := noScript1 - noScript0; noScript != 0 {
		t.Errorf("%d NOSCRIPT replies in the first round", noScript)
	}
	for _, lk := range held {
		if ttl := rdb.PTTL(ctx, lk.key).Val(); ttl <= 10*time.Second {
			t.Fatalf("%s not renewed: PTTL %v", lk.key, ttl)
		}
	}
}

// errorCount returns how many error replies starting with prefix (e.g. NOSCRIPT) rdb's server
// has sent since it started.
func errorCount(t testing.TB, rdb *redis.Client, prefix string) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "errorstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	v, _ := strings.CutPrefix(infoField(info, "errorstat_"+prefix), "count=")
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// TestLockAcrossSlotMigration migrates the slot of a held lock in steps: while its keys have moved
// but the slot is not yet reassigned (ASK), and after (MOVED), the holder keeps renewing it, no
// other owner gets it, and it can be released.
func TestLockAcrossSlotMigration(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, redistest.ClusterConfig{Masters: 3, Replicas: 1})
	holder := New(clusterClient(t, c), quiet)
	contender := New(clusterClient(t, c), quiet)
	ctx := context.Background()
	lk, err := holder.TryLock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	slot := c.KeySlot(lockKey("job"))
	from := c.MasterOfSlot(slot)
	to := c.Masters()[0]
	if to == from {
		to = c.Masters()[1]
	}
	admin := clusterClient(t, c)
	toAdmin := nodeClient(t, to)
	check := func(when string, asked bool) {
		t.Helper()
		if err := admin.PExpire(ctx, lk.key, 10*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		before := commandCalls(t, toAdmin, "asking")
		holder.dog.running.Store(true)
		holder.dog.round()
		if got := commandCalls(t, toAdmin, "asking") > before; got != asked {
			t.Fatalf("%s: renewal sent ASKING to the new master: %v, want %v", when, got, asked)
		}
		if ttl := admin.PTTL(ctx, lk.key).Val(); ttl <= 10*time.Second {
			t.Fatalf("%s: not renewed: PTTL %v", when, ttl)
		}
		if isClosed(lk.Lost()) {
			t.Fatalf("%s: Lost closed", when)
		}
		if _, err := contender.TryLock(ctx, "job"); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("%s: another owner: err = %v, want ErrNotAcquired", when, err)
		}
	}
	m := c.StartMigration(slot, to)
	m.MoveKeys(lk.key, fenceKey("job"))
	check("keys moved, slot migrating", true)
	m.Finish()
	check("slot migrated", false)
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := contender.TryLock(ctx, "job"); err != nil {
		t.Fatalf("another owner after the Unlock: %v", err)
	}
}

// TestRenewalPerSlotFallback renews through the path taken where Redis refuses scripts with flags
// (before 7.0), and with a Ring: one renewSrc call per slot, routed by the client.
func TestRenewalPerSlotFallback(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, redistest.ClusterConfig{Masters: 3})
	rdb := clusterClient(t, c)
	l := New(rdb)
	l.dog.perSlot.Store(true)
	ctx := context.Background()
	var held []*Lock
	for i := range 50 {
		lk, err := l.TryLock(ctx, fmt.Sprint("job-", i))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, lk)
		rdb.PExpire(ctx, lk.key, 10*time.Second)
	}
	l.dog.running.Store(true)
	l.dog.round()
	for _, lk := range held {
		if ttl := rdb.PTTL(ctx, lk.key).Val(); ttl <= 10*time.Second {
			t.Fatalf("%s not renewed: PTTL %v", lk.key, ttl)
		}
	}
}

// TestRing takes, renews and releases locks through a Ring of two servers, whose shards the Locker
// cannot address: acquisitions go through the Ring without waiting for replicas, and renewals per
// hash tag.
func TestRing(t *testing.T) {
	a, b := redistest.Start(t), redistest.Start(t)
	newRing := func() *redis.Ring {
		rdb := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": a.Addr, "b": b.Addr}})
		t.Cleanup(func() { rdb.Close() })
		return rdb
	}
	rdb := newRing()
	l, other := New(rdb), New(newRing())
	ctx := context.Background()
	var held []*Lock
	for i := range 40 {
		lk, err := l.TryLock(ctx, fmt.Sprint("job-", i))
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, lk)
		rdb.PExpire(ctx, lk.key, 10*time.Second)
	}
	if n := newClient(t, a).DBSize(ctx).Val(); n == 0 {
		t.Fatal("no lock on the first shard: the test shows nothing")
	}
	l.dog.running.Store(true)
	l.dog.round()
	for _, lk := range held {
		if ttl := rdb.PTTL(ctx, lk.key).Val(); ttl <= 10*time.Second {
			t.Fatalf("%s not renewed: PTTL %v", lk.key, ttl)
		}
		if _, err := other.TryLock(ctx, lk.Name()); !errors.Is(err, ErrNotAcquired) {
			t.Fatalf("another owner of %s: err = %v, want ErrNotAcquired", lk.Name(), err)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
