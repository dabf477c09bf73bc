package tock

import (
	"errors"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"
)

// executors lists every executor, so that each timing test runs against all of them.
var executors = []struct {
	name string
	opt  Option
}{
	{"pool", WithPoolExecutor(DefaultPoolSize)},
	{"inline", WithInlineExecutor()},
	{"goroutine", WithGoroutineExecutor()},
}

// forEachExecutor runs test in a synctest bubble once per executor.
func forEachExecutor(t *testing.T, test func(t *testing.T, opts ...Option)) {
	for _, e := range executors {
		t.Run(e.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { test(t, e.opt) })
		})
	}
}

// firing records when each callback ran.
type firing struct {
	mu    sync.Mutex
	times map[int]time.Time
}

func newFiring() *firing { return &firing{times: make(map[int]time.Time)} }

func (f *firing) record(id int) func() {
	return func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		if _, dup := f.times[id]; dup {
			panic(fmt.Sprintf("timer %d fired twice", id))
		}
		f.times[id] = time.Now()
	}
}

func (f *firing) get(id int) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	at, ok := f.times[id]
	return at, ok
}

func (f *firing) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.times)
}

// boundaryDelays sweeps both sides of slot edges and level rollovers, and far delays up to the
// largest Duration.
func boundaryDelays(tick time.Duration) []time.Duration {
	ds := []time.Duration{-time.Hour, -1, 0, 1, tick - 1, tick, tick + 1}
	for lvl := 1; lvl < 7; lvl++ {
		span := tick << (slotBits * lvl)
		ds = append(ds, span-tick, span-1, span, span+1, span+tick, 2*span+tick/2, 63*span+tick)
	}
	return append(ds, 24*time.Hour, 365*24*time.Hour, 100*365*24*time.Hour, math.MaxInt64)
}

func TestNeverEarlyAtMostOneTickLate(t *testing.T) {
	forEachExecutor(t, func(t *testing.T, opts ...Option) {
		const tick = time.Millisecond
		w := New(append(opts, WithTick(tick))...)
		defer w.Stop()
		// Start off a tick boundary so that rounding is exercised.
		time.Sleep(tick / 3)
		start := time.Now()
		fired := newFiring()
		ds := boundaryDelays(tick)
		for i, d := range ds {
			if _, err := w.AfterFunc(d, fired.record(i)); err != nil {
				t.Fatalf("AfterFunc(%v): %v", d, err)
			}
		}
		// Far timers fire only after a century; check the near ones now and the far ones by
		// jumping ahead, which the bubble's clock does at once.
		for i, d := range ds {
			if d > 200*365*24*time.Hour {
				continue
			}
			time.Sleep(time.Until(start.Add(d)) + tick)
			synctest.Wait()
			at, ok := fired.get(i)
			if !ok {
				t.Fatalf("timer %d (%v) has not fired a tick after its deadline", i, d)
			}
			deadline := start.Add(max(d, 0))
			if at.Before(deadline) {
				t.Errorf("timer %d (%v) fired %v early", i, d, deadline.Sub(at))
			}
			if late := at.Sub(deadline); late > tick {
				t.Errorf("timer %d (%v) fired %v late, more than a tick", i, d, late)
			}
		}
		if err := w.check(); err != nil {
			t.Fatal(err)
		}
	})
}

func TestMaxDurationStaysPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		ran := false
		tm, err := w.AfterFunc(math.MaxInt64, func() { ran = true })
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(200 * 365 * 24 * time.Hour)
		if ran {
			t.Fatal("a timer at the largest duration fired after 200 years")
		}
		if !tm.Stop() {
			t.Fatal("Stop of the pending far timer returned false")
		}
		if err := w.check(); err != nil {
			t.Fatal(err)
		}
		w.Stop()
	})
}

func TestEarlierTimerWakesDriver(t *testing.T) {
	forEachExecutor(t, func(t *testing.T, opts ...Option) {
		w := New(opts...)
		defer w.Stop()
		fired := newFiring()
		w.AfterFunc(time.Hour, fired.record(0))
		start := time.Now()
		time.Sleep(10 * time.Millisecond)
		w.AfterFunc(5*time.Millisecond, fired.record(1))
		time.Sleep(6 * time.Millisecond)
		synctest.Wait()
		at, ok := fired.get(1)
		if !ok {
			t.Fatal("a timer scheduled before the driver's wake-up did not fire")
		}
		if got := at.Sub(start); got < 15*time.Millisecond || got > 16*time.Millisecond {
			t.Fatalf("fired %v after start, want 15ms to 16ms", got)
		}
		if _, ok := fired.get(0); ok {
			t.Fatal("the hour timer fired")
		}
	})
}

func TestStop(t *testing.T) {
	forEachExecutor(t, func(t *testing.T, opts ...Option) {
		w := New(opts...)
		defer w.Stop()
		fired := newFiring()

		before, _ := w.AfterFunc(10*time.Millisecond, fired.record(0))
		if !before.Stop() {
			t.Error("Stop of a pending timer returned false")
		}
		if before.Stop() {
			t.Error("second Stop returned true")
		}

		after, _ := w.AfterFunc(time.Millisecond, fired.record(1))
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		if after.Stop() {
			t.Error("Stop after the timer fired returned true")
		}
		if _, ok := fired.get(0); ok {
			t.Error("a stopped timer fired")
		}
		if _, ok := fired.get(1); !ok {
			t.Error("an unstopped timer did not fire")
		}

		// Stop from inside the callback of the timer itself: it has fired, so false.
		var self Timer
		var stopped atomic.Bool
		ready := make(chan struct{})
		self, _ = w.AfterFunc(time.Millisecond, func() { <-ready; stopped.Store(self.Stop()) })
		close(ready)
		time.Sleep(5 * time.Millisecond)
		synctest.Wait()
		if stopped.Load() {
			t.Error("Stop from inside the timer's own callback returned true")
		}

		if (Timer{}).Stop() || (Timer{}).Reset(time.Second) {
			t.Error("the zero Timer stopped or reset something")
		}
		if w.Pending() != 0 {
			t.Errorf("Pending() = %d, want 0", w.Pending())
		}
	})
}

// TestStaleHandle checks that a handle kept after its timer ended cannot touch the timer that
// reuses its node.
func TestStaleHandle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New(WithShards(1))
		defer w.Stop()
		old, _ := w.AfterFunc(time.Hour, nop)
		old.Stop()
		fired := newFiring()
		reused, _ := w.AfterFunc(time.Millisecond, fired.record(0))
		if reused.i != old.i {
			t.Fatalf("the free list did not reuse node %d (got %d); the test needs it to", old.i, reused.i)
		}
		if old.Stop() || old.Reset(time.Hour) {
			t.Fatal("a stale handle stopped or reset the timer that reuses its node")
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if _, ok := fired.get(0); !ok {
			t.Fatal("the timer on the reused node did not fire")
		}
	})
}

func TestReset(t *testing.T) {
	forEachExecutor(t, func(t *testing.T, opts ...Option) {
		w := New(opts...)
		defer w.Stop()
		fired := newFiring()
		start := time.Now()

		later, _ := w.AfterFunc(10*time.Millisecond, fired.record(0))
		earlier, _ := w.AfterFunc(time.Hour, fired.record(1))
		if !later.Reset(30*time.Millisecond) || !earlier.Reset(20*time.Millisecond) {
			t.Fatal("Reset of a pending timer returned false")
		}
		time.Sleep(40 * time.Millisecond)
		synctest.Wait()
		for id, want := range map[int]time.Duration{0: 30 * time.Millisecond, 1: 20 * time.Millisecond} {
			at, ok := fired.get(id)
			if !ok || at.Sub(start) != want {
				t.Errorf("timer %d fired at %v (%v), want at %v", id, at.Sub(start), ok, want)
			}
		}
		if later.Reset(time.Millisecond) {
			t.Error("Reset after the timer fired returned true")
		}
		stopped, _ := w.AfterFunc(time.Millisecond, fired.record(2))
		stopped.Stop()
		if stopped.Reset(time.Millisecond) {
			t.Error("Reset after Stop returned true")
		}
		// Reset from inside the timer's own callback: it has fired, so Reset does nothing.
		var self Timer
		var resetInside atomic.Bool
		ready := make(chan struct{})
		self, _ = w.AfterFunc(time.Millisecond, func() { <-ready; resetInside.Store(self.Reset(time.Millisecond)) })
		close(ready)
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if resetInside.Load() {
			t.Error("Reset from inside the timer's own callback returned true")
		}
		if fired.count() != 2 {
			t.Errorf("%d callbacks ran, want 2: Reset re-armed a timer that had ended", fired.count())
		}
	})
}

func TestWheelStop(t *testing.T) {
	forEachExecutor(t, func(t *testing.T, opts ...Option) {
		w := New(opts...)
		fired := newFiring()
		want := make(map[Timer]bool)
		for i := range 100 {
			tm, err := w.AfterFunc(time.Duration(i)*time.Millisecond, fired.record(i))
			if err != nil {
				t.Fatal(err)
			}
			if i >= 50 {
				want[tm] = true
			}
		}
		time.Sleep(49*time.Millisecond + 500*time.Microsecond)
		synctest.Wait()
		unfired := w.Stop()
		if len(unfired) != len(want) {
			t.Fatalf("Stop returned %d timers, want %d", len(unfired), len(want))
		}
		for _, tm := range unfired {
			if !want[tm] {
				t.Fatalf("Stop returned a timer that fired or was never scheduled: %+v", tm)
			}
			delete(want, tm)
		}
		if fired.count() != 50 {
			t.Fatalf("%d fired before Stop, want 50", fired.count())
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if fired.count() != 50 {
			t.Fatal("a timer fired after the wheel stopped")
		}
		if _, err := w.AfterFunc(time.Millisecond, nop); !errors.Is(err, ErrStopped) {
			t.Fatalf("AfterFunc after Stop: %v, want ErrStopped", err)
		}
		if _, err := w.Every(time.Millisecond, nop); !errors.Is(err, ErrStopped) {
			t.Fatalf("Every after Stop: %v, want ErrStopped", err)
		}
		if unfired[0].Stop() || unfired[0].Reset(time.Second) {
			t.Fatal("Stop or Reset of an unfired timer after the wheel stopped returned true")
		}
		if again := w.Stop(); again != nil {
			t.Fatalf("second Stop returned %d timers", len(again))
		}
		if w.Pending() != 0 {
			t.Fatalf("Pending() = %d after Stop", w.Pending())
		}
	})
}

func TestMaxPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New(WithMaxPending(3))
		defer w.Stop()
		var ts []Timer
		for range 3 {
			tm, err := w.AfterFunc(time.Millisecond, nop)
			if err != nil {
				t.Fatal(err)
			}
			ts = append(ts, tm)
		}
		if _, err := w.AfterFunc(time.Millisecond, nop); !errors.Is(err, ErrTooManyPending) {
			t.Fatalf("fourth AfterFunc: %v, want ErrTooManyPending", err)
		}
		if _, err := w.Every(time.Millisecond, nop); !errors.Is(err, ErrTooManyPending) {
			t.Fatalf("Every at the bound: %v, want ErrTooManyPending", err)
		}
		ts[0].Stop()
		if _, err := w.AfterFunc(time.Hour, nop); err != nil {
			t.Fatalf("AfterFunc after a Stop freed room: %v", err)
		}
		time.Sleep(2 * time.Millisecond)
		synctest.Wait()
		if got := w.Pending(); got != 1 {
			t.Fatalf("Pending() = %d, want 1", got)
		}
		for range 2 {
			if _, err := w.AfterFunc(time.Hour, nop); err != nil {
				t.Fatalf("AfterFunc after timers fired: %v", err)
			}
		}
		if _, err := w.AfterFunc(time.Millisecond, nop); !errors.Is(err, ErrTooManyPending) {
			t.Fatalf("AfterFunc past the bound again: %v", err)
		}
	})
}

func TestBadArguments(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		if _, err := w.AfterFunc(time.Second, nil); !errors.Is(err, ErrNilFunc) {
			t.Errorf("AfterFunc(nil): %v", err)
		}
		if _, err := w.Every(0, nop); !errors.Is(err, ErrNonPositivePeriod) {
			t.Errorf("Every(0): %v", err)
		}
		if _, err := w.EveryDelay(-time.Second, nop); !errors.Is(err, ErrNonPositivePeriod) {
			t.Errorf("EveryDelay(-1s): %v", err)
		}
		if w.Pending() != 0 {
			t.Errorf("rejected calls left %d pending", w.Pending())
		}
	})
}

func TestPanickingCallback(t *testing.T) {
	forEachExecutor(t, func(t *testing.T, opts ...Option) {
		var mu sync.Mutex
		var reported []any
		w := New(append(opts, WithPanicHandler(func(r any) {
			mu.Lock()
			reported = append(reported, r)
			mu.Unlock()
		}))...)
		defer w.Stop()
		fired := newFiring()
		// Panics first, last and between others in the same tick, and in a later tick.
		w.AfterFunc(time.Millisecond, func() { panic("first") })
		w.AfterFunc(time.Millisecond, fired.record(0))
		w.AfterFunc(time.Millisecond, func() { panic("middle") })
		w.AfterFunc(time.Millisecond, fired.record(1))
		w.AfterFunc(time.Millisecond, func() { panic("last") })
		w.AfterFunc(2*time.Millisecond, func() { panic("later") })
		w.AfterFunc(3*time.Millisecond, fired.record(2))
		time.Sleep(5 * time.Millisecond)
		synctest.Wait()
		if fired.count() != 3 {
			t.Errorf("%d of 3 callbacks beside the panicking ones ran", fired.count())
		}
		mu.Lock()
		defer mu.Unlock()
		if len(reported) != 4 {
			t.Errorf("reported %v, want 4 panics", reported)
		}
	})
}

func TestManyInOneTick(t *testing.T) {
	forEachExecutor(t, func(t *testing.T, opts ...Option) {
		w := New(opts...)
		defer w.Stop()
		const n = 10_000
		var ran atomic.Int64
		for range n {
			w.AfterFunc(time.Second, func() { ran.Add(1) })
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if got := ran.Load(); got != n {
			t.Fatalf("%d of %d callbacks ran", got, n)
		}
	})
}

// TestIdleWheelHoldsNoGoroutines checks that drivers and pool workers exit once nothing is pending.
func TestIdleWheelHoldsNoGoroutines(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New(WithShards(4))
		var ran atomic.Int64
		for i := range 100 {
			w.AfterFunc(time.Duration(i)*time.Millisecond, func() { ran.Add(1) })
		}
		tm, _ := w.AfterFunc(time.Hour, nop)
		tm.Stop()
		time.Sleep(2 * time.Hour)
		synctest.Wait()
		if ran.Load() != 100 {
			t.Fatalf("%d of 100 ran", ran.Load())
		}
		for i, s := range w.shards {
			s.mu.Lock()
			running := s.running
			s.mu.Unlock()
			if running {
				t.Errorf("shard %d still has a driver with nothing pending", i)
			}
		}
		p := w.exec.(*pool)
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.workers != 0 {
			t.Errorf("%d pool workers remain on an idle wheel", p.workers)
		}
		// The bubble ends only when every goroutine it started has exited, so reaching the end
		// of this function without Stop is itself the check that none is left.
	})
}

// TestBlockedCallbackDoesNotStallPool checks that with the default executor a callback that blocks
// does not hold up callbacks due later.
func TestBlockedCallbackDoesNotStallPool(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		release := make(chan struct{})
		w.AfterFunc(time.Millisecond, func() { <-release })
		fired := newFiring()
		start := time.Now()
		for i := range 10 {
			w.AfterFunc(time.Duration(2+i)*time.Millisecond, fired.record(i))
		}
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		for i := range 10 {
			at, ok := fired.get(i)
			if !ok || at.Sub(start) > time.Duration(3+i)*time.Millisecond {
				t.Errorf("timer %d: fired %v at %v behind a blocked callback", i, ok, at.Sub(start))
			}
		}
		close(release)
	})
}

func TestAllocs(t *testing.T) {
	w := New()
	defer w.Stop()
	for range 1000 {
		w.AfterFunc(time.Hour, nop)
	}
	warm, _ := w.AfterFunc(time.Hour, nop)
	warm.Stop()
	allocs := testing.AllocsPerRun(10_000, func() {
		tm, _ := w.AfterFunc(time.Hour, nop)
		tm.Reset(2 * time.Hour)
		tm.Stop()
	})
	if allocs != 0 {
		t.Fatalf("AfterFunc+Reset+Stop allocates %v times per run, want 0", allocs)
	}
}

func TestAtFunc(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		fired := newFiring()
		at := time.Now().Add(90 * time.Millisecond)
		w.AtFunc(at, fired.record(0))
		w.AtFunc(time.Now().Add(-time.Hour), fired.record(1))
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		if got, ok := fired.get(0); !ok || got.Before(at) || got.Sub(at) > time.Millisecond {
			t.Errorf("AtFunc fired at %v (%v), want %v", got, ok, at)
		}
		if _, ok := fired.get(1); !ok {
			t.Error("AtFunc in the past did not fire")
		}
	})
}

// TestCascadeAtCurBeforeLevelZero is the regression test for a timer due at the first tick of a
// level 1 slot that fired late: once the driver had processed the tick before and stood on that
// slot's first tick, a timer scheduled next landed in level 0, and the driver went to it first,
// skipping the cascade that was due at once.
func TestCascadeAtCurBeforeLevelZero(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New(WithInlineExecutor(), WithShards(1))
		defer w.Stop()
		start := time.Now()
		fired := newFiring()
		w.AfterFunc(slotCount*time.Millisecond, fired.record(0)) // level 1, due at tick 64
		w.AfterFunc((slotCount-1)*time.Millisecond, nop)         // the driver processes tick 63
		time.Sleep((slotCount - 1) * time.Millisecond)
		synctest.Wait()
		w.AfterFunc(10*time.Millisecond, nop) // level 0 of the span that starts at tick 64
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		if at, ok := fired.get(0); !ok || at.Sub(start) != slotCount*time.Millisecond {
			t.Fatalf("fired %v at %v, want at %v", ok, at.Sub(start), slotCount*time.Millisecond)
		}
	})
}

func nop() {}

// TestCallbackGoexit checks that a callback ending its goroutine with runtime.Goexit, which no
// recover stops, neither loses the timers after it nor leaks the driver or worker it ran on.
func TestCallbackGoexit(t *testing.T) {
	forEachExecutor(t, func(t *testing.T, opts ...Option) {
		w := New(append(opts, WithShards(1))...)
		defer w.Stop()
		fired := newFiring()
		// Slots fire newest first, so the Goexit comes first in its tick's batch.
		w.AfterFunc(time.Millisecond, fired.record(0))
		w.AfterFunc(time.Millisecond, runtime.Goexit)
		w.AfterFunc(5*time.Millisecond, fired.record(1))
		var runs atomic.Int64
		w.Every(2*time.Millisecond, func() {
			if runs.Add(1) == 1 {
				runtime.Goexit()
			}
		})
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if fired.count() != 2 {
			t.Fatalf("%d of 2 timers fired after a callback called Goexit", fired.count())
		}
		if runs.Load() != 5 {
			t.Fatalf("a periodic timer whose first run called Goexit ran %d times in 5 periods", runs.Load())
		}
	})
}

// TestStopReleasesMaxPending checks that Stop gives back the WithMaxPending reservations of the
// timers it drops: scheduling on the stopped wheel returned ErrTooManyPending instead of ErrStopped
// when the bound had been reached.
func TestStopReleasesMaxPending(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New(WithMaxPending(2))
		if _, err := w.AfterFunc(time.Hour, func() {}); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Every(time.Hour, func() {}); err != nil {
			t.Fatal(err)
		}
		w.Stop()
		if _, err := w.AfterFunc(time.Hour, func() {}); !errors.Is(err, ErrStopped) {
			t.Errorf("AfterFunc after Stop: %v, want ErrStopped", err)
		}
		if _, err := w.Every(time.Hour, func() {}); !errors.Is(err, ErrStopped) {
			t.Errorf("Every after Stop: %v, want ErrStopped", err)
		}
		if n := w.reserved.Load(); n != 0 {
			t.Errorf("%d timers still reserved after Stop", n)
		}
	})
	// A periodic timer whose run is in progress at Stop is released when the run returns.
	synctest.Test(t, func(t *testing.T) {
		w := New(WithMaxPending(1))
		release := make(chan struct{})
		if _, err := w.Every(time.Second, func() { <-release }); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second + 2*time.Millisecond)
		synctest.Wait()
		w.Stop()
		close(release)
		synctest.Wait()
		if n := w.reserved.Load(); n != 0 {
			t.Errorf("%d timers still reserved after Stop during a periodic run", n)
		}
		if _, err := w.AfterFunc(time.Hour, func() {}); !errors.Is(err, ErrStopped) {
			t.Errorf("AfterFunc after Stop: %v, want ErrStopped", err)
		}
	})
}
