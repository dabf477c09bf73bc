package tock

import (
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

func TestEveryFixedRateDoesNotDrift(t *testing.T) {
	forEachExecutor(t, func(t *testing.T, opts ...Option) {
		w := New(opts...)
		defer w.Stop()
		const period = 1500 * time.Microsecond // not a multiple of the tick
		start := time.Now()
		var mu sync.Mutex
		var runs []time.Duration
		tm, err := w.Every(period, func() {
			mu.Lock()
			runs = append(runs, time.Since(start))
			mu.Unlock()
		})
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(1000*period + period/2)
		synctest.Wait()
		if !tm.Stop() {
			t.Fatal("Stop of a running series returned false")
		}
		mu.Lock()
		defer mu.Unlock()
		if len(runs) != 1000 {
			t.Fatalf("%d runs in 1000 periods", len(runs))
		}
		for n, at := range runs {
			due := time.Duration(n+1) * period
			if at < due || at > due+time.Millisecond {
				t.Fatalf("run %d at %v, due at %v", n+1, at, due)
			}
		}
		if w.Pending() != 0 {
			t.Fatalf("Pending() = %d after Stop", w.Pending())
		}
	})
}

func TestEverySkipsMissedRuns(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		start := time.Now()
		var runs []time.Duration
		var running, overlapped atomic.Bool
		w.Every(10*time.Millisecond, func() {
			if running.Swap(true) {
				overlapped.Store(true)
			}
			runs = append(runs, time.Since(start))
			if len(runs) == 2 {
				time.Sleep(35 * time.Millisecond) // overruns three periods
			}
			running.Store(false)
		})
		time.Sleep(75 * time.Millisecond)
		synctest.Wait()
		want := []time.Duration{10, 20, 60, 70}
		if len(runs) != len(want) {
			t.Fatalf("runs at %v, want at %v ms", runs, want)
		}
		for i := range want {
			if runs[i] != want[i]*time.Millisecond {
				t.Fatalf("runs at %v, want at %v ms", runs, want)
			}
		}
		if overlapped.Load() {
			t.Fatal("runs overlapped")
		}
	})
}

func TestEveryDelay(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		start := time.Now()
		var runs []time.Duration
		w.EveryDelay(10*time.Millisecond, func() {
			runs = append(runs, time.Since(start))
			time.Sleep(5 * time.Millisecond)
		})
		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		want := []time.Duration{10, 25, 40}
		if len(runs) != len(want) {
			t.Fatalf("runs at %v, want at %v ms", runs, want)
		}
		for i := range want {
			if runs[i] != want[i]*time.Millisecond {
				t.Fatalf("runs at %v, want at %v ms", runs, want)
			}
		}
	})
}

func TestEveryStopFromInside(t *testing.T) {
	forEachExecutor(t, func(t *testing.T, opts ...Option) {
		w := New(opts...)
		defer w.Stop()
		var runs atomic.Int64
		var tm Timer
		var stopResult atomic.Bool
		ready := make(chan struct{})
		tm, _ = w.Every(time.Millisecond, func() {
			<-ready
			if runs.Add(1) == 3 {
				stopResult.Store(tm.Stop())
			}
		})
		close(ready)
		time.Sleep(time.Second)
		synctest.Wait()
		if runs.Load() != 3 {
			t.Fatalf("%d runs, want 3: Stop from inside did not end the series", runs.Load())
		}
		if !stopResult.Load() {
			t.Fatal("Stop from inside the callback returned false")
		}
		if tm.Stop() || tm.Reset(time.Millisecond) {
			t.Fatal("Stop or Reset after the series ended returned true")
		}
		if w.Pending() != 0 {
			t.Fatalf("Pending() = %d", w.Pending())
		}
		if err := w.check(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestEveryReset(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New(WithInlineExecutor())
		defer w.Stop()
		start := time.Now()
		var runs []time.Duration
		var tm Timer
		tm, _ = w.Every(10*time.Millisecond, func() {
			runs = append(runs, time.Since(start))
			if len(runs) == 2 {
				tm.Reset(3 * time.Millisecond) // from inside: the next run 3ms after this one
			}
		})
		time.Sleep(5 * time.Millisecond)
		tm.Reset(20 * time.Millisecond) // pending: first run at 25ms
		time.Sleep(60 * time.Millisecond)
		synctest.Wait()
		want := []time.Duration{25, 35, 38, 48, 58}
		if len(runs) != len(want) {
			t.Fatalf("runs at %v, want at %v ms", runs, want)
		}
		for i := range want {
			if runs[i] != want[i]*time.Millisecond {
				t.Fatalf("runs at %v, want at %v ms", runs, want)
			}
		}
	})
}

func TestEveryPanicKeepsSeries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var panics atomic.Int64
		w := New(WithPanicHandler(func(any) { panics.Add(1) }))
		defer w.Stop()
		var runs atomic.Int64
		w.Every(time.Millisecond, func() {
			runs.Add(1)
			panic("boom")
		})
		time.Sleep(10*time.Millisecond + time.Microsecond)
		synctest.Wait()
		if runs.Load() != 10 || panics.Load() != 10 {
			t.Fatalf("%d runs, %d panics reported; want 10 and 10", runs.Load(), panics.Load())
		}
	})
}

func TestWheelStopDuringPeriodicRun(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		inside := make(chan struct{})
		release := make(chan struct{})
		var runs atomic.Int64
		w.Every(time.Millisecond, func() {
			if runs.Add(1) == 1 {
				close(inside)
				<-release
			}
		})
		<-inside
		w.Stop()
		close(release)
		time.Sleep(time.Second)
		synctest.Wait()
		if runs.Load() != 1 {
			t.Fatalf("%d runs after the wheel stopped mid-run", runs.Load())
		}
	})
}

// TestEveryResetFarIntoThePast resets a fixed-rate series to a time far in the past: the next run
// is due at once and later runs are counted from now+d, one period apart. With d near
// math.MinInt64 the catch-up arithmetic overflowed, which skipped a run and shifted the series.
func TestEveryResetFarIntoThePast(t *testing.T) {
	for _, d := range []time.Duration{math.MinInt64, math.MinInt64 / 2, -3300 * time.Millisecond} {
		synctest.Test(t, func(t *testing.T) {
			w := New(WithInlineExecutor())
			defer w.Stop()
			start := time.Now()
			var mu sync.Mutex
			var runs []time.Duration
			tm, err := w.Every(time.Second, func() {
				mu.Lock()
				runs = append(runs, time.Since(start))
				mu.Unlock()
			})
			if err != nil {
				t.Fatal(err)
			}
			time.Sleep(500 * time.Millisecond)
			tm.Reset(d)
			time.Sleep(5 * time.Second)
			// The series is now+d+k*period; its first run after the reset comes less than a
			// period after it (rounded up to the 1ms tick).
			phase := 500*time.Millisecond + d%time.Second
			if phase <= 500*time.Millisecond {
				phase += time.Second
			}
			want := []time.Duration{500 * time.Millisecond}
			for at := phase; at <= 5500*time.Millisecond; at += time.Second {
				want = append(want, (at + time.Millisecond - 1).Truncate(time.Millisecond))
			}
			mu.Lock()
			defer mu.Unlock()
			if !slices.Equal(runs, want) {
				t.Errorf("Reset(%v): runs at %v, want %v", d, runs, want)
			}
		})
	}
}
