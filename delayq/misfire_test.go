package delayq

import (
	"context"
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/queue"
)

// TestMisfireOverlap runs an "@every 4s" schedule of each misfire and overlap policy, closes the
// queue from 6.5 s to 25.5 s (the latest missed time, 24 s, 1.5 s before the reopening: more than
// queue.MisfireGrace) or to 24.5 s (within it), and checks that the nominal times that passed
// while it was closed fire as queue.Schedule's docs say, alike under both overlap policies: each
// (all), the latest (once), none unless within the grace (skip), all due at once. The only
// difference is what was decided before the close: an OverlapAllow schedule had put 8 s ahead
// (delivered late, as any message), an OverlapSkip one puts each fire at its time, so 8 s is
// missed with the others. An OverlapSkip schedule whose fire of 4 s still waits at the reopening
// (due, not received) passes over every missed time, and fires again once it is received and
// acked (at 26 s). The misfires are counted. In a synctest bubble.
func TestMisfireOverlap(t *testing.T) {
	type tc struct {
		overlap queue.Overlap
		misfire queue.Misfire
		closed  float64 // seconds after the start the queue reopens
		waits   bool    // the fire of 4 s is still leased when it does
	}
	var cases []tc
	for _, o := range []queue.Overlap{queue.OverlapAllow, queue.OverlapSkip} {
		for _, m := range []queue.Misfire{queue.MisfireAll, queue.MisfireOnce, queue.MisfireSkip} {
			for _, closed := range []float64{25.5, 24.5} {
				cases = append(cases, tc{o, m, closed, false})
			}
		}
	}
	for _, m := range []queue.Misfire{queue.MisfireAll, queue.MisfireOnce, queue.MisfireSkip} {
		cases = append(cases, tc{queue.OverlapSkip, m, 25.5, true})
	}
	for _, c := range cases {
		name := fmt.Sprintf("%s/%s/reopen-%gs", c.overlap, c.misfire, c.closed)
		if c.waits {
			name += "/fire-waits"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				q := open(t, dir, WithLogger(quiet), WithNoSync())
				start := time.Now() // a whole second: the bubble starts on one
				sec := func(n float64) time.Time { return start.Add(time.Duration(n * float64(time.Second))) }
				sc := queue.Schedule{Name: "s", Topic: "t", Spec: "@every 4s", Misfire: c.misfire, Overlap: c.overlap}
				if _, err := q.SetSchedule(ctx, sc); err != nil {
					t.Fatal(err)
				}
				if c.waits {
					time.Sleep(time.Until(sec(6.5)))
				} else if got := receiveFires(t, q, "t", sec(6.5)); !sameTimes(got, []time.Time{sec(4)}) {
					t.Fatalf("before the close: fires %v; want 4 s", got)
				}
				if err := q.Close(); err != nil {
					t.Fatal(err)
				}
				time.Sleep(time.Until(sec(c.closed)))
				q = open(t, dir, WithLogger(quiet), WithNoSync())
				var want []time.Time
				missed := every(sec(12), sec(24), 4*time.Second)
				if c.overlap == queue.OverlapAllow {
					want = []time.Time{sec(8)} // put ahead at 4 s
				} else {
					missed = every(sec(8), sec(24), 4*time.Second)
				}
				last := missed[len(missed)-1]
				var fired []time.Time // of the missed times
				switch {
				case c.waits:
					// Passed over: the fire of 4 s still waits.
				case c.misfire == queue.MisfireAll:
					fired = missed
				case c.misfire == queue.MisfireOnce:
					fired = []time.Time{last}
				case c.misfire == queue.MisfireSkip && sec(c.closed).Sub(last) <= queue.MisfireGrace:
					fired = []time.Time{last} // late by less than the grace: not missed
				}
				want = append(want, fired...)
				misfires := len(missed) - len(fired)
				if c.waits {
					time.Sleep(time.Until(sec(26)))
					if got := receiveFires(t, q, "t", sec(26.5)); !sameTimes(got, []time.Time{sec(4)}) {
						t.Fatalf("at 26 s: fires %v; want only 4 s, which waited", got)
					}
				}
				want = append(want, sec(28), sec(32))
				got := receiveFires(t, q, "t", sec(33.5))
				if !sameTimes(got, want) {
					t.Fatalf("reopened at %g s: fires %v; want %v", c.closed, got, want)
				}
				info, err := q.Schedule(ctx, "s")
				if err != nil || info.Misfires != uint64(misfires) {
					t.Fatalf("Schedule = %+v, %v; want %d misfires", info, err, misfires)
				}
				check(t, q)
			})
		})
	}
}
