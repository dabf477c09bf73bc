package redisq

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/queue"
)

// A workload puts messages and receives and acks them from several goroutines, and records what
// it must check: every message whose Put returned nil is delivered, none before its due time, and
// none after an Ack of it returned nil. An Ack whose outcome is unknown (its master killed before it
// answered) may have taken effect: the messages it carried come again only if it did not, so a
// message delivered whose last Ack was such counts as acked unless it comes again.
type workload struct {
	t          *testing.T
	prod, cons *Queue
	topic      string
	chosen     bool // put chosen IDs too, one in four

	mu struct {
		sync.Mutex
		put     map[string]time.Time // acknowledged puts and their due times
		acked   map[string]bool
		ackedAt map[string]time.Time
		unsure  map[string]bool // delivered, and the Ack since its last delivery had no answer
		seq     int
	}
	puts, failedPuts atomic.Int64
	deliveries       atomic.Int64
	violations       atomic.Int64
	wg               sync.WaitGroup
}

func newWorkload(t *testing.T, prod, cons *Queue) *workload {
	w := &workload{t: t, prod: prod, cons: cons, topic: "load"}
	w.mu.put = make(map[string]time.Time)
	w.mu.acked = make(map[string]bool)
	w.mu.ackedAt = make(map[string]time.Time)
	w.mu.unsure = make(map[string]bool)
	return w
}

// run starts producers and consumers until ctx ends; producers stop when stopPuts is closed.
func (w *workload) run(ctx context.Context, stopPuts <-chan struct{}, producers, consumers int) {
	for p := range producers {
		w.wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stopPuts:
					return
				case <-ctx.Done():
					return
				default:
				}
				m := queue.Message{Topic: w.topic, Payload: []byte("x"), DeliverAt: time.Now().Add(time.Duration(i%15) * 100 * time.Millisecond)}
				if w.chosen && i%4 == 0 {
					w.mu.Lock()
					w.mu.seq++
					m.ID = fmt.Sprintf("p%d-%d", p, w.mu.seq)
					w.mu.Unlock()
				}
				pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				id, err := w.prod.Put(pctx, m)
				cancel()
				w.puts.Add(1)
				if err != nil {
					w.failedPuts.Add(1)
					if !errors.Is(err, queue.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
						w.t.Errorf("Put: %v", err)
					}
					continue
				}
				w.mu.Lock()
				w.mu.put[id] = m.DeliverAt
				w.mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	for range consumers {
		w.wg.Go(func() {
			for ctx.Err() == nil {
				rctx, cancel := context.WithTimeout(ctx, time.Second)
				ds, err := w.cons.Receive(rctx, w.topic, 16, 2*time.Second)
				cancel()
				now := time.Now()
				if err != nil {
					if !errors.Is(err, queue.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
						w.t.Errorf("Receive: %v", err)
					}
					continue
				}
				w.deliveries.Add(int64(len(ds)))
				var receipts []string
				w.mu.Lock()
				for _, d := range ds {
					if due, ok := w.mu.put[d.ID]; ok && now.Before(due) {
						w.t.Errorf("%q delivered %v before its due time", d.ID, due.Sub(now))
						w.violations.Add(1)
					}
					if w.mu.acked[d.ID] {
						w.t.Errorf("%q delivered %v after an Ack of it returned nil", d.ID, now.Sub(w.mu.ackedAt[d.ID]))
						w.violations.Add(1)
					}
					delete(w.mu.unsure, d.ID) // it came again: that Ack did not take effect
					receipts = append(receipts, d.Receipt)
				}
				w.mu.Unlock()
				actx, cancel := context.WithTimeout(ctx, 5*time.Second)
				err = w.cons.Ack(actx, receipts...)
				cancel()
				var ae *queue.AckError
				switch {
				case err == nil:
				case errors.As(err, &ae):
					// Leases lost in a failover: those messages come again.
					failed := make(map[string]bool)
					for _, f := range ae.Failed {
						failed[f.Receipt] = true
					}
					for i := range ds {
						if failed[ds[i].Receipt] {
							ds[i].ID = ""
						}
					}
				default:
					// The outcome is unknown: the messages come again unless the Ack took effect.
					w.mu.Lock()
					for _, d := range ds {
						w.mu.unsure[d.ID] = true
					}
					w.mu.Unlock()
					continue
				}
				w.mu.Lock()
				for _, d := range ds {
					if d.ID != "" {
						w.mu.acked[d.ID] = true
						w.mu.ackedAt[d.ID] = time.Now()
					}
				}
				w.mu.Unlock()
			}
		})
	}
}

// await waits until the workload has made n more puts that returned nil and n more deliveries, so
// that what follows happens under load however slow the machine; ctx bounds it.
func (w *workload) await(ctx context.Context, n int64) {
	w.t.Helper()
	puts, deliveries := w.puts.Load()-w.failedPuts.Load(), w.deliveries.Load()
	for w.puts.Load()-w.failedPuts.Load() < puts+n || w.deliveries.Load() < deliveries+n {
		select {
		case <-ctx.Done():
			w.t.Fatalf("the workload made fewer than %d puts and deliveries: %v", n, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// pending reports how many acknowledged puts are not acked yet, not counting those whose last
// Ack had no answer (which took effect if they do not come again).
func (w *workload) pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for id := range w.mu.put {
		if !w.mu.acked[id] && !w.mu.unsure[id] {
			n++
		}
	}
	return n
}

// unsure reports how many acknowledged puts were delivered and not acked, and did not come again
// after an Ack of them had no answer.
func (w *workload) unsure() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for id := range w.mu.put {
		if !w.mu.acked[id] && w.mu.unsure[id] {
			n++
		}
	}
	return n
}

// finish waits until every acknowledged put is acked, for at most the duration within (a bound on
// a lost message, not a time the tests rely on), then stops the workload.
func (w *workload) finish(cancel context.CancelFunc, within time.Duration) {
	w.t.Helper()
	deadline := time.Now().Add(within)
	for w.pending() > 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	cancel()
	w.wg.Wait()
	if n := w.pending(); n > 0 {
		w.t.Errorf("%d messages whose Put returned nil were not delivered and acked within %v", n, within)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		replies, err := w.cons.eachShard(ctx, statsScript, func(int) []any { return nil })
		for i, v := range replies {
			w.t.Logf("shard %d: sched, ready, leased, early, now = %v; consumer's %s; producer's %s", i, v, w.cons.shards[i], w.prod.shards[i])
		}
		if err != nil {
			w.t.Log(err)
		}
		if ts := w.cons.topicIfKnown(w.topic); ts != nil {
			ts.mu.Lock()
			w.t.Logf("consumer's heads of %s: %v (now %d)", w.topic, ts.heads, w.cons.clock.now())
			ts.mu.Unlock()
		}
	}
	w.t.Logf("%d puts (%d failed, %.2f%% succeeded), %d acknowledged, %d deliveries, %d taken as acked by an Ack that had no answer",
		w.puts.Load(), w.failedPuts.Load(), 100*float64(w.puts.Load()-w.failedPuts.Load())/float64(max(w.puts.Load(), 1)),
		len(w.mu.put), w.deliveries.Load(), w.unsure())
}

// idsOn returns n chosen IDs whose home shards are on master m.
func idsOn(t *testing.T, c *redistest.Cluster, q *Queue, m *redistest.Node, n int) []string {
	t.Helper()
	on := make(map[int]bool)
	for s := range q.lay.shards() {
		on[s] = c.MasterOfKey(q.lay.metaKey(s)) == m
	}
	var ids []string
	for i := 0; len(ids) < n; i++ {
		id := fmt.Sprint("probe-", i)
		if s := q.lay.home(id); on[s] {
			ids = append(ids, id)
		}
	}
	return ids
}

// producerAndConsumer opens two queues, closed when the test ends, on one new deployment of the
// given number of shards on cluster c: one for a workload's producers, one for its consumers.
func producerAndConsumer(ctx context.Context, t *testing.T, c *redistest.Cluster, shards int) (prod, cons *Queue) {
	t.Helper()
	prefix := newPrefix()
	open := func() *Queue {
		q, err := Open(ctx, clusterClient(t, c.Addrs()), WithPrefix(prefix), WithShards(shards))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.Close() })
		return q
	}
	return open(), open()
}

// TestMasterKilledUnderLoad kills a master with SIGKILL while producers and consumers run, after
// its replica is in sync: its replica takes over; no message whose Put returned nil is lost, none
// is delivered early or after its Ack returned nil; and the test measures how long the killed
// master's shards were not writable, and how many Puts failed meanwhile.
func TestMasterKilledUnderLoad(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{Masters: 3, Replicas: 1, NodeTimeout: redistest.FailoverNodeTimeout,
		Args: []string{"--cluster-require-full-coverage", "no"}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prod, cons := producerAndConsumer(ctx, t, c, 6)
	w := newWorkload(t, prod, cons)
	w.chosen = true
	stopPuts := make(chan struct{})
	w.run(ctx, stopPuts, 6, 3)
	w.await(ctx, 100)
	victim := c.Masters()[1]
	probes := idsOn(t, c, prod, victim, 1000)
	c.WaitHealthy() // its replica has everything acknowledged so far (and WAIT covers the rest)
	killed := time.Now()
	c.Kill(victim.Addr)
	// How long until a chosen ID whose home is on the killed master can be put again (each try
	// waits two seconds at most: on a loaded machine a healthy Put can take a few hundred ms).
	probed := make(chan time.Duration, 1)
	go func() {
		for i := 0; ctx.Err() == nil && time.Since(killed) < time.Minute; i++ {
			pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := prod.Put(pctx, queue.Message{ID: probes[i], Topic: "probe"})
			pcancel()
			if err == nil {
				probed <- time.Since(killed)
				return
			}
		}
		probed <- 0
	}()
	c.WaitPromoted(victim)
	writable := <-probed
	w.await(ctx, 100) // load after the promotion too
	close(stopPuts)
	w.finish(cancel, time.Minute)
	t.Logf("master killed: its shards writable again %v after the kill", writable)
	if writable == 0 {
		t.Fatal("the killed master's shards were not writable again within a minute")
	}
}

// TestReplicaStoppedThenMasterKilled freezes a master's only replica, then kills the master: puts
// to its shards fail (WAIT finds no replica, then min-replicas-to-write refuses them) rather than
// being acknowledged and lost; once the replica is back and has taken over, every put that
// returned nil is delivered.
func TestReplicaStoppedThenMasterKilled(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{Masters: 3, Replicas: 1, NodeTimeout: redistest.FailoverNodeTimeout,
		Args: []string{"--cluster-require-full-coverage", "no", "--min-replicas-to-write", "1", "--min-replicas-max-lag", "1"}})
	ctx := testCtx(t, 3*time.Minute)
	q := openQueue(t, clusterClient(t, c.Addrs()), WithShards(6), WithReplicaWait(1, 300*time.Millisecond))
	victim := c.Masters()[0]
	replica := c.ReplicasOf(victim)[0]
	probes := idsOn(t, c, q, victim, 30)
	acked := make(map[string]bool)
	// put puts probe i, waiting at most wait.
	put := func(i int, wait time.Duration) error {
		id := probes[i]
		pctx, cancel := context.WithTimeout(ctx, wait)
		defer cancel()
		_, err := q.Put(pctx, queue.Message{ID: id, Topic: "t"})
		if err == nil {
			acked[id] = true
		}
		return err
	}
	// A healthy master and replica: however long the put takes. A loaded machine may still keep
	// the replica from confirming within the 300 ms of WithReplicaWait: such a put is not
	// acknowledged, and not counted.
	for i := range 20 {
		err := put(i, time.Minute)
		if err != nil && !errors.Is(err, queue.ErrUnavailable) {
			t.Fatalf("Put before the failure: %v", err)
		}
		if err != nil {
			t.Logf("Put before the failure, not confirmed in time: %v", err)
		}
	}
	if len(acked) == 0 {
		t.Fatal("no Put was acknowledged before the failure: nothing to check")
	}
	c.Pause(replica.Addr)
	failed := 0
	// The first ones wait for the replica in vain (WAIT); after min-replicas-max-lag the master
	// refuses them (NOREPLICAS).
	for i := 20; i < 26; i++ {
		if i == 23 {
			time.Sleep(time.Second)
		}
		err := put(i, 500*time.Millisecond)
		if err == nil {
			t.Errorf("Put to a master whose only replica is frozen returned nil")
			continue
		}
		if !errors.Is(err, queue.ErrUnavailable) && !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Put with the replica frozen: %v; want ErrUnavailable", err)
		}
		failed++
	}
	c.Kill(victim.Addr)
	for i := 26; i < 29; i++ {
		if err := put(i, 500*time.Millisecond); err == nil {
			t.Errorf("Put to a killed master whose replica is frozen returned nil")
		}
	}
	c.Resume(replica.Addr)
	c.WaitPromoted(victim)
	// The new master has no replica, so min-replicas-to-write keeps it from writing (receiving
	// too) until the old master is back as its replica.
	c.Restart(victim.Addr)
	c.WaitHealthy()
	// Until every acknowledged put is delivered (one written but not confirmed may come too).
	got := make(map[string]bool)
	for n := 0; n < len(acked); {
		ds, err := q.Receive(ctx, "t", 100, time.Minute)
		if err != nil {
			t.Fatalf("Receive after the replica took over, with %d of %d: %v", n, len(acked), err)
		}
		for _, d := range ds {
			if acked[d.ID] && !got[d.ID] {
				n++
			}
			got[d.ID] = true
		}
	}
	for id := range acked {
		if !got[id] {
			t.Errorf("%q was acknowledged and lost", id)
		}
	}
	t.Logf("%d puts acknowledged before the replica froze, all delivered; %d refused while it was frozen", len(acked), failed)
}

// TestSlotMigrationUnderLoad moves the slot of a shard to another master, key by key, while
// producers and consumers run: scripts on the shard are refused (TRYAGAIN, ASK, then MOVED) and
// sent again, no script runs on a half-moved shard, and nothing is lost, early or delivered after
// its Ack. Each step of a migration lasts until a write was refused in it, so that a loaded machine
// that sends few writes still meets both the migrating slot and the shard split over two masters.
func TestSlotMigrationUnderLoad(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{Masters: 2})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	prod, cons := producerAndConsumer(ctx, t, c, 2)
	w := newWorkload(t, prod, cons)
	w.chosen = true
	stopPuts := make(chan struct{})
	w.run(ctx, stopPuts, 4, 2)
	for round := range 2 {
		w.await(ctx, 50)
		slot := c.KeySlot(prod.lay.metaKey(0))
		from := c.MasterOfSlot(slot)
		to := c.Masters()[0]
		if to == from {
			to = c.Masters()[1]
		}
		m := c.StartMigration(slot, to)
		waitRefused(t, "the slot migrating", prod, cons)
		// Move the keys in a few steps, so that scripts meet a shard split over two masters.
		m.MoveKeys(prod.lay.metaKey(0))
		waitRefused(t, "the shard split over two masters", prod, cons)
		m.Finish()
		t.Logf("round %d: slot %d of shard 0 moved from %s to %s", round, slot, from.Addr, to.Addr)
	}
	w.await(ctx, 50)
	close(stopPuts)
	w.finish(cancel, time.Minute)
}

// waitRefused waits until Redis has refused one more write of qs (a write sent again: see
// writer.retry), and fails the test if none is within 20 s, a bound on a stuck workload rather
// than a time the test relies on.
func waitRefused(t *testing.T, during string, qs ...*Queue) {
	t.Helper()
	refused := func() (n uint64) {
		for _, q := range qs {
			n += q.metrics.retries.Load()
		}
		return n
	}
	before := refused()
	for deadline := time.Now().Add(20 * time.Second); refused() == before; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no write was refused in 20 s with %s", during)
		}
	}
}

// TestAdminActionsSurviveMasterKill pauses a topic, purges another and requeues a dead letter, and
// then kills a master with SIGKILL at once, without waiting for its replica to catch up beyond what
// the actions waited for themselves (WAIT): after the failover, a process that opens the deployment
// anew finds every action that returned in force: the topic paused (a Receive waits) until Resume,
// the purged messages gone, the requeued one due on its topic again.
func TestAdminActionsSurviveMasterKill(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{Masters: 3, Replicas: 1, NodeTimeout: redistest.FailoverNodeTimeout,
		Args: []string{"--cluster-require-full-coverage", "no"}})
	ctx := testCtx(t, 3*time.Minute)
	prefix := newPrefix()
	q := openQueue(t, clusterClient(t, c.Addrs()), WithPrefix(prefix), WithShards(6), WithMaxAttempts(1))
	const n = 60
	var due, later []queue.Message
	for i := range n {
		due = append(due, queue.Message{ID: fmt.Sprintf("due-%d", i), Topic: "paused"})
		later = append(later, queue.Message{ID: fmt.Sprintf("later-%d", i), Topic: "purged", DeliverAt: time.Now().Add(time.Hour)})
	}
	for _, m := range append(due, later...) {
		if _, err := q.Put(ctx, m); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Put(ctx, queue.Message{ID: "failed", Topic: "work"}); err != nil {
		t.Fatal(err)
	}
	ds, err := q.Receive(ctx, "work", 1, time.Minute)
	if err != nil || len(ds) != 1 {
		t.Fatalf("Receive: %v, %v", ds, err)
	}
	if err := q.Nack(ctx, ds[0].Receipt, 0); err != nil { // the only attempt: a dead letter
		t.Fatal(err)
	}
	if err := q.Pause(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	if got, err := q.Purge(ctx, "purged", queue.Scheduled); got != n || err != nil {
		t.Fatalf("Purge = %d, %v; want %d", got, err, n)
	}
	if got, err := q.Requeue(ctx, "work", "failed"); got != 1 || err != nil {
		t.Fatalf("Requeue = %d, %v; want 1", got, err)
	}
	victim := c.Masters()[1]
	c.Kill(victim.Addr)
	c.WaitPromoted(victim)
	q.Close()

	after := openQueue(t, clusterClient(t, c.Addrs()), WithPrefix(prefix), WithShards(6), WithMaxAttempts(1))
	ti, ok, err := topicOf(ctx, after, "paused")
	if err != nil || !ok || !ti.Paused || ti.Due != n {
		t.Fatalf("topic paused after the failover: %+v, %v, %v; want paused with %d due", ti, ok, err, n)
	}
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	ds, err = after.Receive(wctx, "paused", 10, time.Minute)
	cancel()
	if len(ds) != 0 || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Receive on the paused topic after the failover: %d messages, %v; want it to wait", len(ds), err)
	}
	if ti, ok, err := topicOf(ctx, after, "purged"); err != nil || ok {
		t.Fatalf("purged topic after the failover: %+v, %v, %v; want it gone", ti, ok, err)
	}
	for _, m := range later {
		if _, err := after.Message(ctx, m.ID); !errors.Is(err, queue.ErrNotFound) {
			t.Fatalf("purged message %s after the failover: %v; want ErrNotFound", m.ID, err)
		}
	}
	ds, err = after.Receive(ctx, "work", 1, time.Minute)
	if err != nil || len(ds) != 1 || ds[0].ID != "failed" || ds[0].Attempt != 1 {
		t.Fatalf("the requeued message after the failover: %+v, %v; want it due on work, attempt 1", ds, err)
	}
	if err := after.Resume(ctx, "paused"); err != nil {
		t.Fatal(err)
	}
	got := 0
	for got < n {
		ds, err := after.Receive(ctx, "paused", n, time.Minute)
		if err != nil {
			t.Fatalf("Receive after Resume, with %d of %d: %v", got, n, err)
		}
		got += len(ds)
	}
}

// TestOpenWithANodeDownSaysWhich opens a deployment on a cluster one of whose masters is down
// (and not yet taken for failed by the others): the error says which node refused the connection,
// where it used to say "failover or migration in progress".
func TestOpenWithANodeDownSaysWhich(t *testing.T) {
	c := redistest.StartCluster(t, redistest.ClusterConfig{Masters: 2, NodeTimeout: time.Minute})
	down := c.Masters()[1]
	c.Kill(down.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := Open(ctx, clusterClient(t, c.Addrs()), WithPrefix(newPrefix()))
	want := "cannot connect to Redis at " + down.Addr + ": connection refused"
	if !errors.Is(err, queue.ErrUnavailable) || !strings.Contains(err.Error(), want) {
		t.Fatalf("Open with %s down: %v; want queue.ErrUnavailable saying %q", down.Addr, err, want)
	}
}
