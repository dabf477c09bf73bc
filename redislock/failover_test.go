package redislock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/internal/redistest"
)

// clusterClient returns a client of c with the settings the package doc tells users to use.
func clusterClient(t testing.TB, c *redistest.Cluster) *redis.ClusterClient {
	t.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// nodeClient returns a plain client of one cluster node, for commands the test sends to it alone.
func nodeClient(t testing.TB, n *redistest.Node) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: n.Addr, MaxRetries: -1})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// TestFailoverKeepsWatchdogLock kills the master that holds a watchdog lock and checks that the
// holder keeps it through the failover: its acquisition reached the replica (WAIT), its renewals
// find the promoted replica (the Locker has the client reload the slot map after connection
// errors), no other owner gets it, and the holder's Unlock works. With go-redis's defaults alone the
// renewals kept calling the dead master until the lease ran out.
//
// The lease can only outlive a failover that ends well within it: a round in which the promotion
// took more than half the lease (a loaded machine) proves nothing, and the test runs again with a
// lease twice as long.
func TestFailoverKeepsWatchdogLock(t *testing.T) {
	t.Parallel()
	for timeout := 5 * time.Second; timeout <= 20*time.Second; timeout *= 2 {
		if failoverKeepsWatchdogLock(t, timeout) {
			return
		}
	}
	t.Fatal("no failover ended within half a lease of up to 20 s")
}

// failoverKeepsWatchdogLock is a round of TestFailoverKeepsWatchdogLock with a watchdog timeout of
// timeout, on a cluster of its own. It returns false if the failover was too slow to check.
func failoverKeepsWatchdogLock(t *testing.T, timeout time.Duration) bool {
	c := redistest.StartCluster(t, redistest.ClusterConfig{Masters: 3, Replicas: 1, NodeTimeout: redistest.FailoverNodeTimeout})
	holder := New(clusterClient(t, c), WithWatchdogTimeout(timeout), quiet)
	contender := New(clusterClient(t, c), quiet)
	ctx := context.Background()
	lk, err := holder.TryLock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	master := c.MasterOfKey(lockKey("job"))
	c.Kill(master.Addr)
	killed := time.Now()
	promoted := c.WaitPromoted(master)
	took := time.Since(killed)
	t.Logf("%s took over %v after the kill", promoted.Addr, took)
	if took > timeout/2 {
		t.Logf("the failover took more than half the %v lease: again with a longer one", timeout)
		return false
	}
	// Past the end of the lease the lock had when its master died.
	time.Sleep(time.Until(killed.Add(timeout + timeout/4)))
	if isClosed(lk.Lost()) {
		t.Fatalf("the holder lost its lock %v after the failover", time.Since(killed))
	}
	if _, err := contender.TryLock(ctx, "job"); !errors.Is(err, ErrNotAcquired) {
		t.Fatalf("another owner after the failover: err = %v, want ErrNotAcquired", err)
	}
	uctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := lk.Unlock(uctx); err != nil {
		t.Fatalf("Unlock after the failover: %v", err)
	}
	if _, err := contender.TryLock(ctx, "job"); err != nil {
		t.Fatalf("another owner after the Unlock: %v", err)
	}
	return true
}

// TestFailoverNeverRepeatsToken makes a failover lose the last acquisition of a lock: the replica
// is cut off from its master (paused, its replication link killed), a lock is taken on the master
// without waiting for a replica, and the master is killed. The promoted replica never saw that
// acquisition, so by its fence key the last token is the one before: it must still hand out a
// token above the lost one, or a store fenced with >= would accept writes from both holders.
func TestFailoverNeverRepeatsToken(t *testing.T) {
	t.Parallel()
	c := redistest.StartCluster(t, redistest.ClusterConfig{Masters: 3, Replicas: 1, NodeTimeout: redistest.FailoverNodeTimeout})
	a := New(clusterClient(t, c), WithReplicaWait(0), WithWatchdogTimeout(3*time.Second), quiet)
	b := New(clusterClient(t, c), WithReplicaWait(0), quiet)
	ctx := context.Background()
	for range 3 { // a history of the name, replicated
		lk, err := a.TryLock(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	c.WaitHealthy()
	master := c.MasterOfKey(lockKey("job"))
	replica := c.ReplicasOf(master)[0]
	replica.Pause()
	if err := nodeClient(t, master).ClientKillByFilter(ctx, "TYPE", "replica").Err(); err != nil {
		t.Fatal(err)
	}
	lost, err := a.TryLock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	c.Kill(master.Addr)
	replica.Resume()
	if got := c.WaitPromoted(master); got != replica {
		t.Fatalf("promoted %s, want %s", got.Addr, replica.Addr)
	}
	next, err := b.TryLock(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	if next.Token() <= lost.Token() {
		t.Fatalf("token %d after the failover, not above the lost acquisition's %d", next.Token(), lost.Token())
	}
	// The holder whose acquisition the failover lost learns it at its next renewal.
	waitClosed(t, lost.Lost(), 30*time.Second, "Lost of the acquisition the failover lost")
	t.Logf("lost token %d, next %d", lost.Token(), next.Token())
}

// TestAcquisitionWaitsForReplica pauses the replica of the lock's master, so that it cannot
// acknowledge anything: an acquisition must not be returned, as a failover could lose it; it is
// released and reported as ErrNotReplicated. Once the replica runs again acquisitions succeed. It
// runs on a cluster and on one master with a replica, as Sentinel would manage.
func TestAcquisitionWaitsForReplica(t *testing.T) {
	t.Parallel()
	const wait = time.Second
	cases := []struct {
		name  string
		setup func(t *testing.T) (rdb redis.UniversalClient, admin *redis.Client, replica *redistest.Server)
	}{
		{"cluster", func(t *testing.T) (redis.UniversalClient, *redis.Client, *redistest.Server) {
			c := redistest.StartCluster(t, redistest.ClusterConfig{Masters: 3, Replicas: 1})
			master := c.MasterOfKey(lockKey("job"))
			return clusterClient(t, c), nodeClient(t, master), c.ReplicasOf(master)[0].Server
		}},
		{"one master", func(t *testing.T) (redis.UniversalClient, *redis.Client, *redistest.Server) {
			m, r := startReplicated(t)
			return newClient(t, m), newClient(t, m), r
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			rdb, admin, replica := tc.setup(t)
			l := New(rdb, WithReplicaWait(wait), quiet)
			ctx := context.Background()
			// A first acquisition teaches the Locker that the master has a replica.
			lk := lockReplicated(t, l, "job")
			if err := lk.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			replica.Pause()
			start := time.Now()
			_, err := l.TryLock(ctx, "job")
			took := time.Since(start)
			if err == nil {
				t.Fatalf("TryLock returned a lock %v after the request with its master's only replica paused", took)
			}
			if !errors.Is(err, ErrNotReplicated) {
				t.Fatalf("TryLock with the replica paused: err = %v, want ErrNotReplicated", err)
			}
			if took < wait {
				t.Fatalf("gave up after %v, before WithReplicaWait's %v", took, wait)
			}
			if n := admin.Exists(ctx, lockKey("job")).Val(); n != 0 {
				t.Fatal("the acquisition no replica acknowledged was left held")
			}
			replica.Resume()
			lk = lockReplicated(t, l, "job")
			if err := lk.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// lockReplicated acquires name with l, trying again while no replica acknowledged the acquisition
// within l's replica wait: on a busy machine a running replica can take longer than the second
// the test gives, and the refusal is then right. A replica that runs acknowledges within a minute.
func lockReplicated(t *testing.T, l *Locker, name string) *Lock {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for {
		lk, err := l.TryLock(ctx, name)
		if err == nil {
			return lk
		}
		if !errors.Is(err, ErrNotReplicated) || ctx.Err() != nil {
			t.Fatalf("TryLock with the replica running: %v", err)
		}
	}
}

// startReplicated starts a master and a replica of it, outside a cluster, and waits until the
// replica is in sync.
func startReplicated(t *testing.T) (master, replica *redistest.Server) {
	t.Helper()
	master = redistest.Start(t, "--repl-diskless-sync-delay", "0")
	host, port, _ := strings.Cut(master.Addr, ":")
	replica = redistest.Start(t, "--replicaof", host, port)
	admin := newClient(t, master)
	ctx := context.Background()
	deadline := time.Now().Add(20 * time.Second)
	for {
		info := admin.Info(ctx, "replication").Val()
		if strings.Contains(info, "state=online") {
			return master, replica
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica %s not in sync:\n%s", replica.Addr, info)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
