package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/internal/redistest"
)

var fleetSeed = flag.Uint64("seed", 0, "seed of TestSeveralTockdsShareOneCluster's delays (0: a random one)")

// fleet is what the processes of TestSeveralTockdsShareOneCluster saw: every
// message by its key (its payload), and what became of it.
type fleet struct {
	mu       sync.Mutex
	attempts map[string]time.Time // key -> the earliest it may be due: put sent + its delay
	acked    map[string]time.Time // key -> due time, for puts that returned success
	ackedVia map[string]string    // key -> the tockd that acknowledged its put
	done     map[string]time.Time // key -> when an ack of it returned success
	got      map[string]int       // key -> deliveries
	redone   map[string]int       // key -> highest attempt delivered
	errs     []string
	failures int
}

func (f *fleet) fail(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.failLocked(format, args...)
}

// failLocked records a failure, the first 20 of them in full.
func (f *fleet) failLocked(format string, args ...any) {
	if len(f.errs) < 20 {
		f.errs = append(f.errs, fmt.Sprintf(format, args...))
	}
	f.failures++
}

// TestSeveralTockdsShareOneCluster runs three tockd processes on one Redis
// Cluster of three masters with a replica each. Producers put through two of
// them and consumers receive through the other two; one process, which a
// consumer holds leases through and producers put through, is killed with
// SIGKILL mid-load. Every put that returned success must be delivered, none
// before it was due and none after an ack of it returned success, and the
// messages leased through the killed process must be delivered again by the
// survivors once their visibility ran out.
func TestSeveralTockdsShareOneCluster(t *testing.T) {
	tockdBinary(t)
	seed := *fleetSeed
	if seed == 0 {
		seed = rand.Uint64()
	}
	t.Logf("seed %d (-seed replays its delays)", seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	cluster := redistest.StartCluster(t, redistest.ClusterConfig{Masters: 3, Replicas: 1})
	var seeds []string
	for _, m := range cluster.Masters() {
		seeds = append(seeds, m.Addr)
	}
	prefix := newPrefix()
	target := strings.Join(seeds, ",")
	start := time.Now()
	doomed := startRedisTockd(t, target, prefix)
	producer := startRedisTockd(t, target, prefix)
	consumer := startRedisTockd(t, target, prefix)
	t.Logf("three tockds up in %v", time.Since(start).Round(time.Millisecond))

	const (
		topic      = "fleet"
		visibility = 2 * time.Second
		putFor     = 3 * time.Second
		killAt     = 1200 * time.Millisecond
	)
	ctx := ctxFor(t, 3*time.Minute)
	f := &fleet{attempts: map[string]time.Time{}, acked: map[string]time.Time{}, ackedVia: map[string]string{},
		done: map[string]time.Time{}, got: map[string]int{}, redone: map[string]int{}}

	// Producers: two through the doomed process, two through the producer.
	stopPuts := make(chan struct{})
	var puts sync.WaitGroup
	for i, d := range []*daemon{doomed, doomed, producer, producer} {
		c := d.client(t, client.WithRetries(0, 0))
		r := rand.New(rand.NewPCG(rng.Uint64(), uint64(i)))
		puts.Go(func() {
			for n := 0; ; n++ {
				select {
				case <-stopPuts:
					return
				default:
				}
				key := fmt.Sprintf("p%d-%d", i, n)
				m := client.Message{Delay: time.Duration(r.IntN(1500)) * time.Millisecond, Payload: json.RawMessage(`"` + key + `"`)}
				if n%3 == 0 {
					m.ID = "id-" + key // a chosen ID, whose shard is its hash's
				}
				f.mu.Lock()
				f.attempts[key] = time.Now().Add(m.Delay)
				f.mu.Unlock()
				res, err := c.Put(ctx, topic, m)
				if err != nil {
					if d != doomed {
						f.fail("put %s through a survivor: %v", key, err)
					}
					time.Sleep(20 * time.Millisecond)
					continue
				}
				f.mu.Lock()
				f.acked[key], f.ackedVia[key] = res.DeliverAt, d.url
				f.mu.Unlock()
			}
		})
	}

	// Consumers: two through the producer's process, two through the consumer's.
	stopGets := make(chan struct{})
	var gets sync.WaitGroup
	for _, d := range []*daemon{producer, producer, consumer, consumer} {
		c := d.client(t, client.WithRetries(0, 0))
		gets.Go(func() {
			for {
				select {
				case <-stopGets:
					return
				default:
				}
				asked := time.Now()
				ds, err := c.Receive(ctx, topic, client.ReceiveOptions{Max: 16, Wait: 500 * time.Millisecond, Visibility: visibility})
				if err != nil {
					if ctx.Err() == nil {
						f.fail("receive through a survivor: %v", err)
					}
					return
				}
				var receipts []string
				for _, dl := range ds {
					f.delivered(dl, asked)
					receipts = append(receipts, dl.Receipt)
				}
				if len(receipts) == 0 {
					continue
				}
				if err := c.Ack(ctx, receipts...); err != nil {
					f.fail("ack through a survivor: %v", err)
					continue
				}
				now := time.Now()
				f.mu.Lock()
				for _, dl := range ds {
					f.done[key(dl)] = now
				}
				f.mu.Unlock()
			}
		})
	}

	// A consumer of the doomed process: it takes leases (up to 8, receiving for at most 10 s once
	// it holds one, and for as long as the test may run until then) and dies with them.
	var held []client.Delivery
	dc := doomed.client(t, client.WithRetries(0, 0))
	var holding time.Time // when the first lease came
	for len(held) < 8 && (holding.IsZero() || time.Since(holding) < 10*time.Second) {
		asked := time.Now()
		ds, err := dc.Receive(ctx, topic, client.ReceiveOptions{Max: 8, Wait: time.Second, Visibility: visibility})
		if err != nil {
			t.Fatalf("receive through the doomed tockd, holding %d leases: %v", len(held), err)
		}
		for _, dl := range ds {
			f.delivered(dl, asked)
		}
		held = append(held, ds...)
		if holding.IsZero() && len(held) > 0 {
			holding = time.Now()
		}
	}
	loadStart := time.Now()
	time.Sleep(killAt)
	if err := doomed.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-doomed.done
	killed := time.Now()
	t.Logf("killed one tockd holding %d leases", len(held))
	var receipts []string
	for _, dl := range held {
		receipts = append(receipts, dl.Receipt)
	}
	if err := dc.Ack(ctx, receipts...); err == nil {
		t.Fatal("an ack through the killed tockd succeeded")
	}

	time.Sleep(max(putFor-time.Since(loadStart), 0))
	close(stopPuts)
	puts.Wait()

	// Everything acknowledged is delivered: after the visibility, on a loaded machine some time
	// more; a minute bounds a message that never comes.
	deadline := time.Now().Add(visibility + time.Minute)
	for {
		f.mu.Lock()
		var missing []string
		for k := range f.acked {
			if f.done[k].IsZero() {
				missing = append(missing, k)
			}
		}
		for _, dl := range held {
			if f.redone[key(dl)] < 2 && !slices.Contains(missing, key(dl)) {
				missing = append(missing, key(dl)+" (held by the killed tockd)")
			}
		}
		f.mu.Unlock()
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			slices.Sort(missing)
			t.Errorf("%d messages not delivered and acked %v after the kill: %v", len(missing), time.Since(killed).Round(time.Millisecond), missing[:min(len(missing), 20)])
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// A while more: nothing acked comes again, though any lease taken
	// before its ack would have run out.
	time.Sleep(visibility + 500*time.Millisecond)
	close(stopGets)
	gets.Wait()

	f.mu.Lock()
	defer f.mu.Unlock()
	for _, e := range f.errs {
		t.Error(e)
	}
	if f.failures > len(f.errs) {
		t.Errorf("and %d failures more", f.failures-len(f.errs))
	}
	survivorPuts := 0
	for _, via := range f.ackedVia {
		if via == producer.url {
			survivorPuts++
		}
	}
	t.Logf("%d puts acknowledged (%d through the survivor), %d tried, %d delivered, in %v",
		len(f.acked), survivorPuts, len(f.attempts), len(f.got), time.Since(start).Round(time.Millisecond))
	if survivorPuts == 0 || len(f.acked) == survivorPuts {
		t.Errorf("puts acknowledged: %d through the survivor of %d; want some through each", survivorPuts, len(f.acked))
	}
}

// key is the key a delivery's payload carries.
func key(dl client.Delivery) string {
	var k string
	_ = json.Unmarshal(dl.Payload, &k)
	return k
}

// delivered checks a delivery returned by a receive asked at asked.
func (f *fleet) delivered(dl client.Delivery, asked time.Time) {
	now := time.Now()
	k := key(dl)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.got[k]++
	f.redone[k] = max(f.redone[k], dl.Attempt)
	earliest, tried := f.attempts[k]
	due, acked := f.acked[k]
	switch {
	case !tried:
		f.failLocked("delivered %s (%s), never put", k, dl.ID)
	case now.Before(earliest) || (acked && now.Before(due)):
		f.failLocked("%s delivered at %v, early: due at %v", k, now, due)
	case !f.done[k].IsZero() && asked.After(f.done[k]):
		f.failLocked("%s delivered again (attempt %d) by a receive asked %v after its ack returned",
			k, dl.Attempt, asked.Sub(f.done[k]))
	}
}
