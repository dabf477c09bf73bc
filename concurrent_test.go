package tock

import (
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestConcurrentUse has many goroutines schedule, stop and reset timers of one wheel at once,
// against the real clock so that drivers fire timers at the same time, and checks that every
// timer either fired once or was stopped, never both. Run it with -race. The delays are a few
// milliseconds, so it takes about that long.
func TestConcurrentUse(t *testing.T) {
	w := New(WithShards(4))
	defer w.Stop()
	const goroutines = 16
	const perGoroutine = 2000
	var fired, stopped atomic.Int64
	var ended sync.WaitGroup // one count per timer, done when it fires or is stopped
	ended.Add(goroutines * perGoroutine)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 7))
			var mine []Timer
			var once []atomic.Bool
			once = make([]atomic.Bool, perGoroutine)
			for i := range perGoroutine {
				d := time.Duration(r.IntN(3000)) * time.Microsecond
				tm, err := w.AfterFunc(d, func() {
					if once[i].Swap(true) {
						t.Errorf("timer fired twice")
					}
					fired.Add(1)
					ended.Done()
				})
				if err != nil {
					t.Error(err)
					return
				}
				mine = append(mine, tm)
				if j := r.IntN(len(mine)); r.IntN(3) == 0 {
					if mine[j].Stop() {
						stopped.Add(1)
						ended.Done()
					}
				} else if r.IntN(3) == 0 {
					mine[j].Reset(time.Duration(r.IntN(2000)) * time.Microsecond)
				}
			}
		}()
	}
	wg.Wait()
	ended.Wait() // hangs, and the test times out, if a timer neither fires nor is stopped
	if got := fired.Load() + stopped.Load(); got != goroutines*perGoroutine {
		t.Fatalf("fired %d + stopped %d = %d, want %d", fired.Load(), stopped.Load(), got, goroutines*perGoroutine)
	}
	if err := w.check(); err != nil {
		t.Fatal(err)
	}
}
