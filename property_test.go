package tock

import (
	"flag"
	"math/rand/v2"
	"testing"
	"testing/synctest"
	"time"
)

var seedFlag = flag.Uint64("seed", 0, "seed for the randomized tests (0: a new one)")

// seed returns the seed for a randomized test and logs it, so a failure can be replayed with -seed.
func seed(t *testing.T) uint64 {
	s := *seedFlag
	if s == 0 {
		s = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (replay with -seed=%d)", s, s)
	return s
}

// modelTimer is the reference model's view of one timer: when it was asked for, and what the
// wheel has told about it.
type modelTimer struct {
	handle   Timer
	deadline time.Time // call time + d: it must not fire before this
	latest   time.Time // the end of the tick after the rounded-up deadline: it must have fired by then
	stopped  bool      // Stop or Reset was answered in a way that says it will not fire (Stop true)
	fired    time.Time
}

// TestAgainstModel drives a wheel with random schedule, stop, reset and advance steps and compares
// each answer with a simple model: a timer fires once, never before its deadline and within a tick
// after it, unless Stop returned true, and Stop and Reset return true exactly while it is pending.
func TestAgainstModel(t *testing.T) {
	s := seed(t)
	for round := range 20 {
		r := rand.New(rand.NewPCG(s, uint64(round)))
		synctest.Test(t, func(t *testing.T) { runModel(t, r) })
		if t.Failed() {
			return
		}
	}
}

func runModel(t *testing.T, r *rand.Rand) {
	const tick = time.Millisecond
	shards := 1 + r.IntN(3)
	w := New(WithInlineExecutor(), WithTick(tick), WithShards(shards))
	defer w.Stop()
	var timers []*modelTimer
	randomDelay := func() time.Duration {
		switch r.IntN(6) {
		case 0:
			return time.Duration(r.Int64N(int64(3*tick))) - tick // around now, negative too
		case 1:
			return time.Duration(r.Int64N(int64(100 * tick)))
		case 2:
			return time.Duration(r.Int64N(int64(10 * time.Second)))
		case 3:
			return time.Duration(r.Int64N(int64(48 * time.Hour)))
		case 4: // on a slot edge of a random level, give or take a nanosecond
			span := tick << (slotBits * (1 + r.IntN(4)))
			return span*time.Duration(1+r.IntN(3)) + time.Duration(r.IntN(3)-1)
		default:
			return time.Duration(r.Int64N(int64(200 * time.Millisecond)))
		}
	}
	bounds := func(d time.Duration) (time.Time, time.Time) {
		now := time.Now()
		deadline := now.Add(max(d, 0))
		// The wheel rounds the deadline up to a tick of its own epoch; a tick later is the bound.
		return deadline, deadline.Add(2 * tick)
	}
	for step := range 400 {
		switch op := r.IntN(10); {
		case op < 4:
			m := &modelTimer{}
			d := randomDelay()
			m.deadline, m.latest = bounds(d)
			h, err := w.AfterFunc(d, func() {
				if !m.fired.IsZero() {
					t.Fatalf("step %d: timer fired twice", step)
				}
				m.fired = time.Now()
			})
			if err != nil {
				t.Fatalf("step %d: AfterFunc(%v): %v", step, d, err)
			}
			m.handle = h
			timers = append(timers, m)
		case op < 6 && len(timers) > 0:
			m := timers[r.IntN(len(timers))]
			pending := m.fired.IsZero() && !m.stopped
			if got := m.handle.Stop(); got != pending {
				t.Fatalf("step %d: Stop = %v, want %v (fired %v, stopped %v)", step, got, pending, m.fired, m.stopped)
			}
			if pending {
				m.stopped = true
			}
		case op < 8 && len(timers) > 0:
			m := timers[r.IntN(len(timers))]
			pending := m.fired.IsZero() && !m.stopped
			d := randomDelay()
			if got := m.handle.Reset(d); got != pending {
				t.Fatalf("step %d: Reset = %v, want %v", step, got, pending)
			}
			if pending {
				m.deadline, m.latest = bounds(d)
			}
		default:
			time.Sleep(randomDelay())
		}
		// Let the drivers finish whatever the step made due, then compare.
		synctest.Wait()
		now := time.Now()
		live := 0
		for i, m := range timers {
			switch {
			case !m.fired.IsZero() && m.stopped:
				t.Fatalf("step %d: timer %d fired after Stop returned true", step, i)
			case !m.fired.IsZero() && m.fired.Before(m.deadline):
				t.Fatalf("step %d: timer %d fired %v early", step, i, m.deadline.Sub(m.fired))
			case !m.fired.IsZero() && m.fired.After(m.latest):
				t.Fatalf("step %d: timer %d fired %v late", step, i, m.fired.Sub(m.deadline))
			case m.fired.IsZero() && !m.stopped && now.After(m.latest):
				t.Fatalf("step %d: timer %d has not fired %v after its deadline", step, i, now.Sub(m.deadline))
			case m.fired.IsZero() && !m.stopped:
				live++
			}
		}
		if got := w.Pending(); got != live {
			t.Fatalf("step %d: Pending() = %d, model has %d", step, got, live)
		}
		if err := w.check(); err != nil {
			t.Fatalf("step %d: %v", step, err)
		}
	}
}
