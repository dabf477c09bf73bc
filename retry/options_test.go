package retry_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/retry"
)

// badOptions lists an invalid value of every option that refuses some, with the text that must name
// it in the error.
var badOptions = []struct {
	opt  retry.Option
	name string
}{
	{retry.WithBackoff(retry.Constant(-1)), "WithBackoff(Constant(-1ns))"},
	{retry.WithBackoff(retry.Exponential(0, time.Second)), "WithBackoff(Exponential(0s, 1s))"},
	{retry.WithBackoff(retry.Exponential(time.Second, time.Millisecond)), "WithBackoff(Exponential(1s, 1ms))"},
	{retry.WithMaxAttempts(-1), "WithMaxAttempts(-1)"},
	{retry.WithMaxElapsed(-time.Second), "WithMaxElapsed(-1s)"},
	{retry.WithAttemptTimeout(-time.Second), "WithAttemptTimeout(-1s)"},
	{retry.WithMaxPending(-1), "WithMaxPending(-1)"},
	{retry.WithWorkers(0), "WithWorkers(0)"},
}

// mustBeInvalidOption fails t unless err wraps ErrInvalidOption and its message names the option.
func mustBeInvalidOption(t *testing.T, err error, name string) {
	t.Helper()
	if !errors.Is(err, retry.ErrInvalidOption) {
		t.Fatalf("error %v; want one wrapping ErrInvalidOption", err)
	}
	if !strings.HasPrefix(err.Error(), "retry: ") || !strings.Contains(err.Error(), name) {
		t.Fatalf("error %q; want it to start with \"retry: \" and name %s", err, name)
	}
}

// A bad option is a bug in the calling program: New panics at once with an error that wraps
// ErrInvalidOption and names the option, however many good options surround it.
func TestNewPanicsNamingBadOption(t *testing.T) {
	for _, tt := range badOptions {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				err, _ := recover().(error)
				mustBeInvalidOption(t, err, tt.name)
			}()
			retry.New(retry.WithWorkers(2), tt.opt, retry.WithMaxAttempts(3))
			t.Fatal("New returned despite an invalid option")
		})
	}
}

// Do reports a bad option as its error, at once: the operation is never called.
func TestDoReportsBadOptionBeforeFirstAttempt(t *testing.T) {
	for _, tt := range badOptions {
		t.Run(tt.name, func(t *testing.T) {
			var calls atomic.Int32
			err := retry.Do(t.Context(), func(context.Context) error { calls.Add(1); return nil }, tt.opt)
			mustBeInvalidOption(t, err, tt.name)
			if calls.Load() != 0 {
				t.Fatalf("op called %d times despite the invalid option", calls.Load())
			}
		})
	}
}

// A nil operation is a bad argument to a call that returns an error.
func TestNilOperation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retry.New()
		defer q.Close()
		if err := q.Add("k", nil); !errors.Is(err, retry.ErrInvalidOption) || q.Pending() != 0 {
			t.Errorf("Add(nil op) = %v, Pending() = %d; want ErrInvalidOption and nothing added", err, q.Pending())
		}
		if err := retry.Do(t.Context(), nil); !errors.Is(err, retry.ErrInvalidOption) {
			t.Errorf("Do(nil op) = %v, want ErrInvalidOption", err)
		}
	})
}

// A nil Option is ignored, so that options can be chosen conditionally.
func TestNilOptionIgnored(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var maybe retry.Option // a feature turned off in the configuration
		q := retry.New(nil, retry.WithBackoff(retry.Constant(time.Second)), maybe)
		defer q.Close()
		start := time.Now()
		var times record[time.Duration]
		if err := q.Add("k", failing(1, &times, start)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Minute)
		if got, want := times.get(), []time.Duration{time.Second, 2 * time.Second}; !slices.Equal(got, want) {
			t.Fatalf("attempts at %v, want %v", got, want)
		}
		n := 0
		err := retry.Do(t.Context(), func(context.Context) error {
			if n++; n < 2 {
				return errFlaky
			}
			return nil
		}, maybe, retry.WithBackoff(retry.Constant(time.Second)), nil)
		if err != nil || n != 2 {
			t.Fatalf("Do = %v after %d attempts, want nil after 2", err, n)
		}
	})
}

// WithBackoff(nil) means the default backoff, Exponential(DefaultInitialDelay, DefaultMaxDelay),
// also after another backoff was set: the first retry comes within DefaultInitialDelay.
func TestBackoffNilMeansDefault(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retry.New(retry.WithBackoff(retry.Constant(time.Hour)), retry.WithBackoff(nil))
		defer q.Close()
		start := time.Now()
		var times record[time.Duration]
		q.Add("k", failing(0, &times, start))
		time.Sleep(retry.DefaultInitialDelay)
		synctest.Wait()
		if got := times.get(); len(got) != 1 || got[0] > retry.DefaultInitialDelay {
			t.Fatalf("attempts at %v; want one within %v, the default backoff's first delay", got, retry.DefaultInitialDelay)
		}

		start = time.Now()
		var doTimes record[time.Duration]
		if err := retry.Do(t.Context(), failing(1, &doTimes, start),
			retry.WithBackoff(retry.Constant(time.Hour)), retry.WithBackoff(nil)); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > retry.DefaultInitialDelay {
			t.Fatalf("Do retried after %v; want within %v, the default backoff's first delay", d, retry.DefaultInitialDelay)
		}
	})
}

// A nil hook is no hook, also after another hook was set.
func TestHookNilMeansNone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var called atomic.Int32
		hooks := []retry.Option{
			retry.WithBackoff(retry.Constant(time.Second)), retry.WithMaxAttempts(2), retry.WithMaxPending(1),
			retry.WithOnFailure(func(string, int, error, time.Duration) { called.Add(1) }), retry.WithOnFailure(nil),
			retry.WithOnGiveUp(func(string, int, error) { called.Add(1) }), retry.WithOnGiveUp(nil),
			retry.WithOnOverflow(func(string) { called.Add(1) }), retry.WithOnOverflow(nil),
		}
		q := retry.New(hooks...)
		defer q.Close()
		fail := func(context.Context) error { return errFlaky }
		q.Add("a", fail)
		if err := q.Add("b", fail); !errors.Is(err, retry.ErrFull) {
			t.Fatalf("Add beyond the bound = %v, want ErrFull", err)
		}
		time.Sleep(time.Minute) // a fails twice and is given up
		if q.Pending() != 0 {
			t.Fatalf("Pending() = %d, want 0: a given up", q.Pending())
		}
		if err := retry.Do(t.Context(), fail, hooks...); !errors.Is(err, retry.ErrGaveUp) {
			t.Fatalf("Do = %v, want ErrGaveUp", err)
		}
		if n := called.Load(); n != 0 {
			t.Fatalf("hooks replaced by nil were called %d times", n)
		}
	})
}

// WithWheel(nil) means no WithWheel, also after a wheel was given: the queue times its attempts on
// a wheel of its own, and Do on runtime timers; the wheel given first is left alone.
func TestWheelNilMeansOwnWheel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := tock.New()
		defer w.Stop()
		q := retry.New(retry.WithWheel(w), retry.WithWheel(nil), retry.WithBackoff(retry.Constant(time.Second)))
		defer q.Close()
		var ran atomic.Bool
		q.Add("k", func(context.Context) error { ran.Store(true); return nil })
		if w.Pending() != 0 {
			t.Fatalf("the wheel given before WithWheel(nil) holds %d timers, want 0", w.Pending())
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if !ran.Load() {
			t.Fatal("the attempt did not run on the queue's own wheel")
		}

		done := make(chan error)
		go func() {
			done <- retry.Do(t.Context(), failing(1, new(record[time.Duration]), time.Now()),
				retry.WithWheel(w), retry.WithWheel(nil), retry.WithBackoff(retry.Constant(time.Second)))
		}()
		synctest.Wait() // Do waits for its second attempt
		if w.Pending() != 0 {
			t.Fatalf("Do waits on the wheel given before WithWheel(nil) (%d timers), want a runtime timer", w.Pending())
		}
		if err := <-done; err != nil {
			t.Fatalf("Do = %v, want nil", err)
		}
	})
}

// A queue without WithWheel works inside a testing/synctest bubble (its wheel is made by New, in
// the bubble), and Close stops that wheel, so no goroutine of it is left behind although keys
// were waiting an hour away.
func TestQueueOwnWheelStoppedByClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q := retry.New(retry.WithBackoff(retry.Constant(time.Hour)))
		for _, k := range []string{"a", "b", "c"} {
			if err := q.Add(k, func(context.Context) error { return nil }); err != nil {
				t.Fatal(err)
			}
		}
		synctest.Wait()
		if n := goroutinesIn("tockwheel/tock"); n == 0 {
			t.Fatal("no driver goroutine for waiting keys; the test would prove nothing")
		}
		if keys := q.Close(); len(keys) != 3 {
			t.Fatalf("Close() = %v, want the 3 waiting keys", keys)
		}
		synctest.Wait()
		if n := goroutinesIn("tockwheel/tock"); n != 0 {
			t.Fatalf("%d goroutines of the queue's wheel after Close, want 0: Close stops the wheel it made", n)
		}
	})
}

// Close never stops a wheel given with WithWheel: the program goes on using it.
func TestQueueCloseLeavesGivenWheel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := tock.New()
		defer w.Stop()
		q := retry.New(retry.WithWheel(w))
		q.Add("k", func(context.Context) error { return nil })
		q.Close()
		if _, err := w.AfterFunc(time.Second, func() {}); err != nil {
			t.Fatalf("AfterFunc on the shared wheel after the queue's Close: %v", err)
		}
	})
}
