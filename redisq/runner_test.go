package redisq

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tockwheel/tock"
)

// TestRunnerTimerRefusedByWheel sets a driver's timer on a shared wheel that refuses it (its
// WithMaxPending bound reached by the rest of the program): the timer is set on the runtime's
// timers instead, and said so in the log, and the work runs. Before, the refusal left the driver
// with no timer, silent until an event came.
func TestRunnerTimerRefusedByWheel(t *testing.T) {
	w := tock.New(tock.WithMaxPending(1))
	defer w.Stop()
	if _, err := w.AfterFunc(time.Hour, func() {}); err != nil {
		t.Fatal(err)
	}
	var log logBuffer
	q := &Queue{wheel: w, log: log.logger()}
	var mu sync.Mutex
	ran := make(chan struct{}, 1)
	var r runner
	r.init(q, &mu, func() {
		mu.Lock()
		r.endLocked()
		mu.Unlock()
		ran <- struct{}{}
	})
	mu.Lock()
	r.setTimerLocked(q.clock.now() + 10)
	mu.Unlock()
	select {
	case <-ran:
	case <-time.After(time.Minute):
		t.Fatal("the work did not run: the timer the wheel refused was lost")
	}
	q.wg.Wait()
	if !strings.Contains(log.String(), "the wheel refused a timer") {
		t.Errorf("the refusal is not in the log:\n%s", log.String())
	}
	mu.Lock()
	r.stopLocked()
	mu.Unlock()
}
