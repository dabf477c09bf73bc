package redistest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// clusterClient returns a client of c with a short slot-map reload, as failover tests need.
func clusterClient(t *testing.T, c *Cluster) *redis.ClusterClient {
	t.Helper()
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ClusterStateReloadInterval: 100 * time.Millisecond})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// keyOn returns a key whose slot master m serves.
func keyOn(t *testing.T, c *Cluster, m *Node) string {
	t.Helper()
	for i := range 1000 {
		k := fmt.Sprint("key-", i)
		if c.MasterOfKey(k) == m {
			return k
		}
	}
	t.Fatalf("no key of the first thousand is served by %s", m.Addr)
	return ""
}

func TestStartClusterWithReplicas(t *testing.T) {
	t.Parallel()
	start := time.Now()
	c := StartCluster(t, ClusterConfig{Masters: 3, Replicas: 1})
	t.Logf("3 masters and 3 replicas healthy after %v", time.Since(start))
	masters := c.Masters()
	if len(masters) != 3 || len(c.Nodes()) != 6 {
		t.Fatalf("%d masters of %d nodes, want 3 of 6", len(masters), len(c.Nodes()))
	}
	for i, m := range masters {
		if m != c.Nodes()[i] {
			t.Errorf("master %d is %s, want the node started %d-th", i, m.Addr, i)
		}
		rs := c.ReplicasOf(m)
		if len(rs) != 1 || rs[0] != c.Nodes()[3+i] {
			t.Errorf("replicas of %s: %v, want the node started %d-th", m.Addr, rs, 3+i)
		}
	}
	if got := c.MasterOfSlot(0); got != masters[0] {
		t.Errorf("slot 0 on %s, want %s", got.Addr, masters[0].Addr)
	}
	if got := c.MasterOfSlot(SlotCount - 1); got != masters[2] {
		t.Errorf("slot 16383 on %s, want %s", got.Addr, masters[2].Addr)
	}
	if got := c.KeySlot("foo"); got != 12182 {
		t.Errorf("KeySlot(foo) = %d, want 12182", got)
	}

	rdb := clusterClient(t, c)
	ctx := context.Background()
	for i := range 30 {
		if err := rdb.Set(ctx, fmt.Sprint("k", i), i, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Cluster rules are enforced: keys of one command must share a slot.
	if err := rdb.Do(ctx, "MSET", "a", "1", "b", "2").Err(); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("MSET across slots: err = %v, want CROSSSLOT", err)
	}
	// Writes reach the replicas: a healthy cluster has replicas in sync.
	c.WaitHealthy()
	for i := range 30 {
		k := fmt.Sprint("k", i)
		r := c.ReplicasOf(c.MasterOfKey(k))[0]
		if err := r.admin.Do(ctx, "READONLY").Err(); err != nil {
			t.Fatal(err)
		}
		if got, err := r.admin.Get(ctx, k).Int(); err != nil || got != i {
			t.Fatalf("GET %s on replica %s = %d, %v; want %d", k, r.Addr, got, err, i)
		}
	}
}

// TestKillMasterPromotesReplica kills a master: its replica takes over with the data that reached
// it, and the old master comes back as a replica of its successor.
func TestKillMasterPromotesReplica(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, ClusterConfig{Masters: 3, Replicas: 1, NodeTimeout: FailoverNodeTimeout})
	rdb := clusterClient(t, c)
	ctx := context.Background()
	old := c.Masters()[1]
	replica := c.ReplicasOf(old)[0]
	key := keyOn(t, c, old)
	if err := rdb.Set(ctx, key, "before", 0).Err(); err != nil {
		t.Fatal(err)
	}
	c.WaitHealthy() // the write is on the replica

	killed := time.Now()
	c.Kill(old.Addr)
	if got := c.WaitPromoted(old); got != replica {
		t.Fatalf("promoted %s, want the replica %s", got.Addr, replica.Addr)
	}
	t.Logf("replica took over %v after the kill", time.Since(killed))
	if got := c.MasterOfKey(key); got != replica {
		t.Fatalf("%s served by %s, want %s", key, got.Addr, replica.Addr)
	}
	var got string
	var err error
	// The client learns of the new master at its next slot-map reload; a minute bounds one that
	// never does, however loaded the machine.
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if got, err = rdb.Get(ctx, key).Result(); err == nil {
			break
		}
	}
	if got != "before" {
		t.Fatalf("GET %s after the failover = %q, %v; want before", key, got, err)
	}

	c.Restart(old.Addr)
	c.WaitHealthy()
	if rs := c.ReplicasOf(replica); len(rs) != 1 || rs[0] != old {
		t.Fatalf("replicas of the new master: %v, want the restarted old master", rs)
	}
}

// TestPausedMasterFailsOver pauses a master for longer than the node timeout: it is failed over,
// and once resumed it learns that it lost its slots and becomes a replica.
func TestPausedMasterFailsOver(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, ClusterConfig{Masters: 3, Replicas: 1, NodeTimeout: FailoverNodeTimeout})
	old := c.Masters()[0]
	replica := c.ReplicasOf(old)[0]
	c.Pause(old.Addr)
	if got := c.WaitPromoted(old); got != replica {
		t.Fatalf("promoted %s, want %s", got.Addr, replica.Addr)
	}
	c.Resume(old.Addr)
	c.WaitHealthy()
	if rs := c.ReplicasOf(replica); len(rs) != 1 || rs[0] != old {
		t.Fatalf("replicas of the new master: %v, want the resumed old master", rs)
	}
}

func TestManualFailover(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, ClusterConfig{Masters: 3, Replicas: 1})
	old := c.Masters()[2]
	replica := c.ReplicasOf(old)[0]
	c.Failover(replica.Addr)
	if got := c.Masters()[2]; got != replica {
		t.Fatalf("third master %s, want %s", got.Addr, replica.Addr)
	}
}

// TestMigrateSlot moves a slot in steps and checks the redirections a client meets on the way:
// ASK for a key already moved while the slot migrates, MOVED once it is done.
func TestMigrateSlot(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, ClusterConfig{Masters: 3})
	rdb := clusterClient(t, c)
	ctx := context.Background()
	const moved, stays = "{tag}moved", "{tag}stays"
	for _, k := range []string{moved, stays} {
		if err := rdb.Set(ctx, k, k, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	slot := c.KeySlot(moved)
	from := c.MasterOfSlot(slot)
	to := c.Masters()[0]
	if to == from {
		to = c.Masters()[1]
	}
	m := c.StartMigration(slot, to)
	m.MoveKeys(moved)
	if err := from.admin.Get(ctx, moved).Err(); err == nil || !strings.HasPrefix(err.Error(), "ASK ") {
		t.Fatalf("GET of a moved key on the migrating master: err = %v, want ASK", err)
	}
	if got, err := from.admin.Get(ctx, stays).Result(); err != nil || got != stays {
		t.Fatalf("GET of a key not yet moved on the migrating master = %q, %v", got, err)
	}
	for _, k := range []string{moved, stays} { // the cluster client follows ASK
		if got, err := rdb.Get(ctx, k).Result(); err != nil || got != k {
			t.Fatalf("GET %s during the migration = %q, %v", k, got, err)
		}
	}
	m.Finish()
	if got := c.MasterOfSlot(slot); got != to {
		t.Fatalf("slot %d on %s after the migration, want %s", slot, got.Addr, to.Addr)
	}
	if err := from.admin.Get(ctx, stays).Err(); err == nil || !strings.HasPrefix(err.Error(), "MOVED ") {
		t.Fatalf("GET on the old master after the migration: err = %v, want MOVED", err)
	}
	for _, k := range []string{moved, stays} {
		if got, err := rdb.Get(ctx, k).Result(); err != nil || got != k {
			t.Fatalf("GET %s after the migration = %q, %v", k, got, err)
		}
	}
}

// TestOneNodeCluster starts a cluster of one master, which enforces cluster rules at the cost of
// one process.
func TestOneNodeCluster(t *testing.T) {
	t.Parallel()
	c := StartCluster(t, ClusterConfig{Masters: 1})
	rdb := clusterClient(t, c)
	ctx := context.Background()
	if err := rdb.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "MSET", "a", "1", "b", "2").Err(); err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Fatalf("MSET across slots: err = %v, want CROSSSLOT", err)
	}
}

// cleanupRecorder is a testing.TB whose cleanups run when the test says so.
type cleanupRecorder struct {
	testing.TB
	mu       sync.Mutex
	cleanups []func()
}

func (r *cleanupRecorder) Cleanup(f func()) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.cleanups = append(r.cleanups, f)
}

func (r *cleanupRecorder) runCleanups() {
	r.mu.Lock()
	fs := r.cleanups
	r.cleanups = nil
	r.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// TestClusterCleanupKillsEveryNode checks that the cleanups StartCluster registers kill every
// process it started, paused ones included.
func TestClusterCleanupKillsEveryNode(t *testing.T) {
	t.Parallel()
	rec := &cleanupRecorder{TB: t}
	defer rec.runCleanups() // should the test fail half-way
	c := StartCluster(rec, ClusterConfig{Masters: 1, Replicas: 1})
	var pids []int
	for _, n := range c.Nodes() {
		n.mu.Lock()
		pids = append(pids, n.mu.proc.Process.Pid)
		n.mu.Unlock()
	}
	c.Pause(c.Nodes()[1].Addr)
	rec.runCleanups()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after the cleanups (kill -0: %v)", pid, err)
		}
	}
}
