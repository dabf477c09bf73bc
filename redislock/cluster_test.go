package redislock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/internal/redistest"
)

var slotKeys = []string{
	"", "foo", "bar", "hello", "123456789", "{", "}", "{}", "}{", "{}x", "x{}", "{a}", "{a}b", "b{a}",
	"{a}{b}", "a{b}c{d}", "a{{b}}", "{{}}", "a}b{c}", "tock:lock:{job}", "tock:lock:{job}:fence",
	"tock:lock:{a{b}:fence", "\x00\xff{\x80}", "ünïcödé{ключ}",
}

// slotOracle starts a redis-server in cluster mode, whose CLUSTER KEYSLOT is the reference.
func slotOracle(t testing.TB) *redis.Client {
	s := redistest.Start(t, "--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf")
	return newClient(t, s)
}

func checkSlot(t testing.TB, rdb *redis.Client, key string) {
	t.Helper()
	want, err := rdb.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := keySlot(key); int64(got) != want {
		t.Fatalf("keySlot(%q) = %d, Redis says %d", key, got, want)
	}
}

func TestKeySlotMatchesRedis(t *testing.T) {
	rdb := slotOracle(t)
	for _, k := range slotKeys {
		checkSlot(t, rdb, k)
	}
	if got := crc16("123456789"); got != 0x31c3 {
		t.Fatalf("crc16 check value = %#x, want 0x31c3", got)
	}
}

func FuzzKeySlot(f *testing.F) {
	for _, k := range slotKeys {
		f.Add(k)
	}
	rdb := slotOracle(f)
	f.Fuzz(func(t *testing.T, key string) {
		checkSlot(t, rdb, key)
		// A lock's keys always share a slot, whatever the name, which is what lets its scripts
		// run in Redis Cluster.
		if keySlot(lockKey(key)) != keySlot(fenceKey(key)) && validName(key) {
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
	a, b := New(newCluster()), New(newCluster())
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
	waitClosed(t, waiting, 10*time.Second, "waiter subscribed")
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
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not woken by the release")
	}
}
