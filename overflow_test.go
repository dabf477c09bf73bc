package tock

import (
	"math"
	"testing"
	"testing/synctest"
	"time"
)

// TestUntilTickSaturates checks the driver's wait for the last tick a deadline can have, whose
// start in nanoseconds overflows int64 for most ticks: the wait must be long, never negative,
// which made the driver spin instead of sleeping.
func TestUntilTickSaturates(t *testing.T) {
	for _, tick := range []time.Duration{time.Microsecond, time.Millisecond, 1 << 20, time.Hour, 1 << 40, 1 << 62} {
		synctest.Test(t, func(t *testing.T) {
			w := New(WithTick(tick))
			last := w.tickAt(math.MaxInt64)
			if d := w.untilTick(last); d < math.MaxInt64-time.Hour {
				t.Errorf("tick %v: untilTick(%d) = %v, want about math.MaxInt64", tick, last, d)
			}
			if d := w.untilTick(1); d <= 0 || d > tick {
				t.Errorf("tick %v: untilTick(1) = %v, want (0, %v]", tick, d, tick)
			}
			w.Stop()
		})
	}
}

// TestMaxDeadlineDoesNotSpinDriver schedules a timer for math.MaxInt64 on wheels whose last tick
// is the next one with work at once (power-of-two ticks make it so). At the wheel's epoch the
// driver computed a negative wait from the overflowing tick start and spun, which in a bubble also
// froze the clock, so the sleep below never returned.
func TestMaxDeadlineDoesNotSpinDriver(t *testing.T) {
	for _, tick := range []time.Duration{1 << 20, 1 << 40} {
		synctest.Test(t, func(t *testing.T) {
			w := New(WithTick(tick), WithShards(1))
			defer w.Stop()
			if _, err := w.AfterFunc(math.MaxInt64, func() { t.Error("the math.MaxInt64 timer fired") }); err != nil {
				t.Fatal(err)
			}
			synctest.Wait()
			time.Sleep(time.Hour)
			fired := make(chan struct{})
			if _, err := w.AfterFunc(time.Hour, func() { close(fired) }); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Hour + 2*tick)
			select {
			case <-fired:
			default:
				t.Errorf("tick %v: the one-hour timer did not fire", tick)
			}
			if n := w.Pending(); n != 1 {
				t.Errorf("tick %v: Pending = %d, want 1", tick, n)
			}
		})
	}
}
