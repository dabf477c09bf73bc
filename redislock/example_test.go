package redislock_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/redislock"
)

// The holder of a watchdog lock stops its work when the lock is lost, and passes the fencing token
// to the storage it writes to.
func Example() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	w := tock.New() // shared with the rest of the program
	defer w.Stop()
	locker := redislock.New(rdb, redislock.WithWheel(w))

	lk, err := locker.Lock(ctx, "invoice:42")
	if err != nil {
		log.Fatal(err)
	}
	defer lk.Unlock(context.WithoutCancel(ctx))

	work, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-lk.Lost():
			cancel() // someone else may hold the lock now
		case <-work.Done():
		}
	}()
	fmt.Println("writing invoice 42 with fencing token", lk.Token())
}

// TryLock gives up at once when the lock is held elsewhere.
func ExampleLocker_TryLock() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	locker := redislock.New(rdb)

	lk, err := locker.TryLock(ctx, "nightly-report", redislock.WithLease(time.Minute))
	if errors.Is(err, redislock.ErrNotAcquired) {
		fmt.Println("another instance is running the report")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer lk.Unlock(ctx)
	fmt.Println("running the report")
}

// An owner token makes a lock reentrant: a worker that holds a lock may take it again, and frees it
// after as many unlocks.
func ExampleWithOwner() {
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379"})
	defer rdb.Close()
	locker := redislock.New(rdb)
	owner := redislock.WithOwner("worker-7")

	outer, err := locker.Lock(ctx, "account:9", owner)
	if err != nil {
		log.Fatal(err)
	}
	inner, err := locker.Lock(ctx, "account:9", owner) // does not wait: same owner
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(outer.Token() == inner.Token()) // one acquisition, one token
	_ = inner.Unlock(ctx)
	_ = outer.Unlock(ctx) // now free
}

// A Locker on Redis Cluster, with the client settings the package doc recommends. On masters with
// replicas, an acquisition is returned once a replica has it, so that a failover keeps it.
func ExampleNew_cluster() {
	ctx := context.Background()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs:                 []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"},
		ContextTimeoutEnabled: true, // a renewal round ends with its period
	})
	defer rdb.Close()
	locker := redislock.New(rdb, redislock.WithReplicaWait(500*time.Millisecond))

	lk, err := locker.TryLock(ctx, "shard-7-housekeeping")
	switch {
	case errors.Is(err, redislock.ErrNotAcquired):
		return // another instance does it
	case errors.Is(err, redislock.ErrNotReplicated):
		log.Print("no replica acknowledged the lock; trying again later")
		return
	case err != nil:
		log.Fatal(err)
	}
	defer lk.Unlock(context.WithoutCancel(ctx))
	fmt.Println("housekeeping with fencing token", lk.Token())
}
