package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/internal/disktest"
	"github.com/tockwheel/tock/internal/testwait"
)

// TestFullDiskComesBackByItself fills a real disk (a small tmpfs) under a tockd while producers
// put, twice, freeing the space in between. Every put that fails, those in flight when the disk
// filled included, is answered 503, never 500; /readyz answers 503 and /metrics counts the outage
// while it lasts; the log says when it began and when it ended; and once the space is back tockd
// serves again by itself, without a restart. At the end, every acknowledged put is delivered,
// none before its due time.
func TestFullDiskComesBackByItself(t *testing.T) {
	disk := disktest.Small(t, 4<<20)
	d := startTockd(t, filepath.Join(disk, "data"), nil, "-log-level", "debug")
	c := d.client(t, client.WithRetries(0, 0))
	ctx := ctxFor(t, 5*time.Minute)

	var mu sync.Mutex
	acked := make(map[string]time.Time) // ID -> due
	for outage := 1; outage <= 2; outage++ {
		// Producers put until each has been refused; the disk fills while they run.
		mu.Lock()
		before := len(acked)
		mu.Unlock()
		const notYet = `msg="the queue cannot be reopened yet`
		tries := strings.Count(d.logs(), notYet)
		const producers = 4
		errs := make([]error, producers)
		var wg sync.WaitGroup
		for p := range producers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					due := time.Now().Add(time.Duration(i%5) * time.Second)
					payload, _ := json.Marshal(fmt.Sprintf("%d-%d-%d %s", outage, p, i, strings.Repeat("x", 200)))
					r, err := c.Put(ctx, "full", client.Message{Payload: payload, DeliverAt: due})
					if err != nil {
						errs[p] = err
						return
					}
					mu.Lock()
					acked[r.ID] = due
					mu.Unlock()
				}
			}()
		}
		ballast := filepath.Join(disk, "ballast")
		testwait.Until(t, ctx, "the producers' first puts", func() bool { // puts in flight
			mu.Lock()
			defer mu.Unlock()
			return len(acked) > before
		})
		filled := disktest.FillTo(t, ballast, 0)
		wg.Wait()
		for p, err := range errs {
			var ce *client.Error
			if !errors.As(err, &ce) || ce.StatusCode != http.StatusServiceUnavailable {
				t.Errorf("outage %d: producer %d: %v, want a 503", outage, p, err)
			}
		}
		if err := c.Ready(ctx); !errors.Is(err, client.ErrUnavailable) {
			t.Errorf("outage %d: /readyz: %v, want 503", outage, err)
		}
		// The outage begins when a call or the watch meets the stopped queue: the producers' did.
		if got := metricValue(t, d, "tock_store_unavailable"); got != 1 {
			t.Errorf("outage %d: tock_store_unavailable %d during the outage, want 1", outage, got)
		}
		if got := metricValue(t, d, "tock_store_outages_total"); got != outage {
			t.Errorf("outage %d: tock_store_outages_total %d, want %d", outage, got, outage)
		}
		// Still out while the disk is full, however long: tockd tries its directory first. Each try
		// that fails is logged (its probe file's name, and so its error, is new each time).
		testwait.Until(t, ctx, "a try to reopen the queue on the full disk", func() bool {
			return strings.Count(d.logs(), notYet) > tries
		})
		if _, err := c.Put(ctx, "full", client.Message{Payload: json.RawMessage(`1`)}); !errors.Is(err, client.ErrUnavailable) {
			t.Errorf("outage %d: a put on a full disk: %v, want 503", outage, err)
		}
		if got := metricValue(t, d, "tock_store_outages_total"); got != outage {
			t.Errorf("outage %d: tock_store_outages_total %d while the disk stays full, want %d", outage, got, outage)
		}
		if err := os.Remove(ballast); err != nil {
			t.Fatal(err)
		}
		// Back by itself: tries are at most reopenMaxWait apart, so a minute is a dozen of them.
		back := time.Now().Add(time.Minute)
		for err := c.Ready(ctx); err != nil; err = c.Ready(ctx) {
			if !errors.Is(err, client.ErrUnavailable) {
				t.Fatalf("outage %d: /readyz after the space came back: %v", outage, err)
			}
			if time.Now().After(back) {
				t.Fatalf("outage %d: tockd still unavailable a minute after the space came back: %v", outage, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		if got := metricValue(t, d, "tock_store_unavailable"); got != 0 {
			t.Errorf("outage %d: tock_store_unavailable %d after it, want 0", outage, got)
		}
		t.Logf("outage %d: %d bytes filled the disk; %d puts acknowledged so far", outage, filled, len(acked))
	}
	for _, line := range []string{`msg="queue unavailable`, `msg="queue available again`} {
		if n := strings.Count(d.logs(), line); n != 2 {
			t.Errorf("%d log lines %s, want one per outage:\n%s", n, line, d.logs())
		}
	}

	// Every acknowledged put is there, and none comes early.
	seen := make(map[string]bool)
	for len(seen) < len(acked) {
		ds, err := c.Receive(ctx, "full", client.ReceiveOptions{Max: 100, Wait: 10 * time.Second, Visibility: time.Hour})
		if err != nil {
			t.Fatalf("Receive with %d of %d acknowledged puts delivered: %v", len(seen), len(acked), err)
		}
		if len(ds) == 0 {
			t.Fatalf("nothing more to receive with %d of %d acknowledged puts delivered", len(seen), len(acked))
		}
		now := time.Now()
		var receipts []string
		for _, dl := range ds {
			if due, ok := acked[dl.ID]; ok {
				seen[dl.ID] = true
				if now.Before(due) {
					t.Errorf("%s delivered %v before its due time", dl.ID, due.Sub(now))
				}
			}
			receipts = append(receipts, dl.Receipt)
		}
		if err := c.Ack(ctx, receipts...); err != nil {
			t.Fatal(err)
		}
	}
}
