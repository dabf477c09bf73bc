package tock_test

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tockwheel/tock"
)

func ExampleNew() {
	// A wheel for a server's connection timeouts: 10 ms is precise enough and wakes the wheel
	// less often than the default 1 ms tick; at most a million timeouts may be pending.
	w := tock.New(tock.WithTick(10*time.Millisecond), tock.WithMaxPending(1_000_000))
	defer w.Stop()

	done := make(chan struct{})
	w.AfterFunc(30*time.Millisecond, func() { close(done) })
	<-done
	fmt.Println("fired")
	// Output: fired
}

func ExampleWheel_AfterFunc() {
	w := tock.New()
	defer w.Stop()

	start := time.Now()
	fired := make(chan time.Duration)
	if _, err := w.AfterFunc(20*time.Millisecond, func() { fired <- time.Since(start) }); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("never early:", <-fired >= 20*time.Millisecond)
	// Output: never early: true
}

func ExampleTimer_Stop() {
	w := tock.New()
	defer w.Stop()

	t, _ := w.AfterFunc(time.Hour, func() { fmt.Println("timed out") })
	// The work finished in time.
	fmt.Println("stopped:", t.Stop())
	fmt.Println("stopped again:", t.Stop())
	// Output:
	// stopped: true
	// stopped again: false
}

// An idle timeout: each use of the connection pushes the deadline back.
func ExampleTimer_Reset() {
	w := tock.New()
	defer w.Stop()

	closed := make(chan struct{})
	idle, _ := w.AfterFunc(50*time.Millisecond, func() { close(closed) })
	for range 3 {
		time.Sleep(20 * time.Millisecond) // used again before the timeout
		idle.Reset(50 * time.Millisecond)
	}
	<-closed
	fmt.Println("closed after going idle")
	// Once fired, a timer cannot be re-armed: schedule a new one.
	fmt.Println("reset after firing:", idle.Reset(time.Second))
	// Output:
	// closed after going idle
	// reset after firing: false
}

func ExampleWheel_Every() {
	w := tock.New()
	defer w.Stop()

	var count atomic.Int64
	runs := make(chan int64)
	t, _ := w.Every(5*time.Millisecond, func() {
		if n := count.Add(1); n <= 3 {
			runs <- n
		}
	})
	for range 3 {
		fmt.Println("run", <-runs)
	}
	t.Stop() // ends the series; Stop may also be called from inside the callback
	// Output:
	// run 1
	// run 2
	// run 3
}

func ExampleWheel_Stop() {
	w := tock.New()
	w.AfterFunc(time.Hour, func() {})
	w.AfterFunc(2*time.Hour, func() {})

	unfired := w.Stop()
	fmt.Println("never fired:", len(unfired))
	_, err := w.AfterFunc(time.Second, func() {})
	fmt.Println(errors.Is(err, tock.ErrStopped))
	// Output:
	// never fired: 2
	// true
}

func ExampleWithMaxPending() {
	w := tock.New(tock.WithMaxPending(1))
	defer w.Stop()

	w.AfterFunc(time.Hour, func() {})
	_, err := w.AfterFunc(time.Hour, func() {})
	fmt.Println(errors.Is(err, tock.ErrTooManyPending))
	// Output: true
}
