package main

import (
	"fmt"
	"maps"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/internal/testlong"
	"github.com/tockwheel/tock/internal/testwait"
	"github.com/tockwheel/tock/queue"
)

// TestSchedulesSurviveKills runs schedules @every 1s (200, or 1,000 in long mode) on three tockds
// sharing a 3-master cluster with a replica each, kills one tockd (SIGKILL) and then a master
// while they fire, and checks what the two survivors deliver: for every schedule, each nominal
// time from its first fire to its last, once (a first delivery of a fire ID is counted once; a
// redelivery after a lost ack is the same message again, attempt 2 or more). The schedules use
// MisfireAll, so that the seconds a failover takes are fired when the shard is back, not skipped.
func TestSchedulesSurviveKills(t *testing.T) {
	tockdBinary(t)
	n := testlong.Pick(200, 1000)
	cluster := redistest.StartCluster(t, redistest.ClusterConfig{Masters: 3, Replicas: 1,
		Args: []string{"--cluster-require-full-coverage", "no"}})
	var target string
	for i, m := range cluster.Masters() {
		if i > 0 {
			target += ","
		}
		target += m.Addr
	}
	prefix := newPrefix()
	doomed := startRedisTockd(t, target, prefix)
	a := startRedisTockd(t, target, prefix)
	b := startRedisTockd(t, target, prefix)
	ctx := ctxFor(t, 90*time.Second)

	setter := doomed.client(t)
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		if _, _, err := setter.SetSchedule(ctx, name, client.ScheduleRequest{Topic: "fires", Spec: "@every 1s", Misfire: "all"}); err != nil {
			t.Fatalf("set %s: %v", name, err)
		}
	}
	var mu sync.Mutex
	firsts := map[string]int{} // fire ID -> deliveries with attempt 1
	fired := map[string]int{}  // schedule -> fires delivered
	// firedEach reports whether every schedule has had more than the fires of before delivered,
	// by at least more, and returns the fires each has had.
	firedEach := func(before map[string]int, more int) (bool, map[string]int) {
		mu.Lock()
		defer mu.Unlock()
		ok := len(fired) == n
		for name, k := range fired {
			ok = ok && k >= before[name]+more
		}
		return ok, maps.Clone(fired)
	}
	waitFires := func(what string, before map[string]int, more int) map[string]int {
		t.Helper()
		var now map[string]int
		testwait.Until(t, ctx, what, func() bool {
			var ok bool
			ok, now = firedEach(before, more)
			return ok
		})
		return now
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for _, d := range []*daemon{a, a, b, b} {
		c := d.client(t, client.WithRetries(0, 0))
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				ds, err := c.Receive(ctx, "fires", client.ReceiveOptions{Max: 500, Wait: 500 * time.Millisecond, Visibility: 10 * time.Second})
				if err != nil {
					time.Sleep(50 * time.Millisecond) // a shard failing over
					continue
				}
				var receipts []string
				mu.Lock()
				for _, dl := range ds {
					if dl.Attempt == 1 {
						if firsts[dl.ID]++; firsts[dl.ID] == 1 {
							if name, _, ok := queue.ParseFireID(dl.ID); ok {
								fired[name]++
							}
						}
					}
					receipts = append(receipts, dl.Receipt)
				}
				mu.Unlock()
				if len(receipts) > 0 {
					_ = c.Ack(ctx, receipts...) // one lost in the failover is delivered again, attempt 2
				}
			}
		})
	}
	seen := waitFires("two fires of every schedule before the kill", nil, 2)
	if err := doomed.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-doomed.done
	seen = waitFires("two more fires of every schedule after the tockd's kill", seen, 2)
	victim := cluster.Masters()[1]
	cluster.WaitHealthy()
	cluster.Kill(victim.Addr)
	cluster.WaitPromoted(victim)
	waitFires("three more fires of every schedule after the master's failover", seen, 3)
	survivor := a.client(t)
	for i := range n {
		if _, err := survivor.PauseSchedule(ctx, fmt.Sprintf("s%d", i)); err != nil {
			t.Fatalf("pause s%d: %v", i, err)
		}
	}
	// What was put before the pauses is received and acked: nothing of the topic is left.
	testwait.Until(t, ctx, "every fire put to be received", func() bool {
		ts, err := survivor.Topics(ctx)
		if err != nil {
			return false
		}
		for _, tp := range ts {
			if tp.Topic == "fires" {
				return tp.Scheduled+tp.Due+tp.Leased == 0
			}
		}
		return true // a topic with nothing left may go unlisted
	})
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	times := map[string][]time.Time{}
	for id, c := range firsts {
		name, at, ok := queue.ParseFireID(id)
		if !ok {
			t.Fatalf("delivered %q, not a fire", id)
		}
		if c > 1 {
			t.Errorf("fire %q put twice: %d first deliveries", id, c)
		}
		times[name] = append(times[name], at)
	}
	total := 0
	for i := range n {
		name := fmt.Sprintf("s%d", i)
		ts := times[name]
		if len(ts) < 3 {
			t.Errorf("schedule %s fired %d times: too few to tell a gap", name, len(ts))
			continue
		}
		first, last := ts[0], ts[0]
		for _, at := range ts {
			if at.Before(first) {
				first = at
			}
			if at.After(last) {
				last = at
			}
		}
		if want := int(last.Sub(first)/time.Second) + 1; want != len(ts) {
			t.Errorf("schedule %s: %d fires from %v to %v; want %d, one a second", name, len(ts), first, last, want)
		}
		total += len(ts)
	}
	t.Logf("%d schedules, %d fires delivered, a tockd and a master killed", n, total)
}
