package tock

import (
	"testing"
	"testing/synctest"
	"time"
)

// A timer that outlives its wheel fires at its deadline after the wheel stops, on a runtime
// timer; it is not among the timers Stop returns; and its handle still stops it, exactly once.
func TestHandOffOutlivesWheel(t *testing.T) {
	forEachExecutor(t, func(t *testing.T, opts ...Option) {
		w := New(opts...)
		start := time.Now()
		fired := newFiring()
		var handedOff []Timer
		for i := range 4 {
			tm, err := w.scheduleHandOff(w.deadline(time.Duration(i+1)*time.Hour), fired.record(i))
			if err != nil {
				t.Fatal(err)
			}
			handedOff = append(handedOff, tm)
		}
		plain, _ := w.AfterFunc(time.Hour, fired.record(99))
		unfired := w.Stop()
		if len(unfired) != 1 || unfired[0] != plain {
			t.Fatalf("Stop returned %v, want only the plain timer %v", unfired, plain)
		}
		if !handedOff[1].Stop() || handedOff[1].Stop() {
			t.Fatal("Stop of a handed-off timer: want true once, then false")
		}
		if handedOff[2].Reset(time.Minute) {
			t.Fatal("Reset of a handed-off timer = true, want false as for every timer of a stopped wheel")
		}
		time.Sleep(5 * time.Hour)
		synctest.Wait()
		for i, want := range []bool{true, false, true, true} {
			at, ok := fired.get(i)
			if ok != want {
				t.Fatalf("timer %d fired: %v, want %v", i, ok, want)
			}
			if ok && at.Sub(start) != time.Duration(i+1)*time.Hour {
				t.Fatalf("timer %d fired after %v, want %v: the runtime timer keeps the deadline", i, at.Sub(start), time.Duration(i+1)*time.Hour)
			}
		}
		if _, ok := fired.get(99); ok {
			t.Fatal("a plain timer fired after its wheel stopped")
		}
		if handedOff[0].Stop() {
			t.Fatal("Stop of a handed-off timer that fired = true")
		}
	})
}
