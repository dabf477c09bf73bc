package retry_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/retry"
)

func TestDoRetriesUntilSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := tock.New()
		defer w.Stop()
		start := time.Now()
		var times record[time.Duration]
		var hooked []int
		err := retry.Do(t.Context(), failing(2, &times, start), retry.WithWheel(w),
			retry.WithBackoff(retry.Constant(time.Second)),
			retry.WithOnFailure(func(key string, attempt int, err error, next time.Duration) {
				if key != "" || err != errFlaky || next != time.Second {
					t.Errorf("failure hook got %q, %v, %v", key, err, next)
				}
				hooked = append(hooked, attempt)
			}))
		if err != nil {
			t.Fatalf("Do = %v", err)
		}
		if got, want := times.get(), []time.Duration{0, time.Second, 2 * time.Second}; !slices.Equal(got, want) {
			t.Fatalf("attempts at %v, want %v: the first at once", got, want)
		}
		if !slices.Equal(hooked, []int{1, 2}) {
			t.Fatalf("failure hook got attempts %v, want [1 2]", hooked)
		}
	})
}

func TestDoGivesUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := tock.New()
		defer w.Stop()
		errBad := errors.New("bad")
		err := retry.Do(t.Context(), func(context.Context) error { return retry.Permanent(errBad) }, retry.WithWheel(w))
		if err != errBad {
			t.Fatalf("Do with a permanent error = %v, want the error itself", err)
		}

		var hookErr error
		start := time.Now()
		err = retry.Do(t.Context(), func(context.Context) error { return errFlaky }, retry.WithWheel(w),
			retry.WithBackoff(retry.Constant(time.Second)), retry.WithMaxAttempts(4),
			retry.WithOnGiveUp(func(_ string, attempts int, err error) { hookErr = err }))
		if !errors.Is(err, retry.ErrGaveUp) || !errors.Is(err, errFlaky) || err.Error() != "retry: gave up after 4 attempts: flaky" {
			t.Fatalf("Do = %v, want ErrGaveUp after 4 attempts wrapping the last error", err)
		}
		if hookErr != err {
			t.Fatalf("give-up hook got %v, want %v", hookErr, err)
		}
		if d := time.Since(start); d != 3*time.Second {
			t.Fatalf("gave up after %v, want 3s", d)
		}

		start = time.Now()
		err = retry.Do(t.Context(), func(context.Context) error { return errFlaky }, retry.WithWheel(w),
			retry.WithBackoff(retry.Constant(time.Second)), retry.WithMaxElapsed(2500*time.Millisecond))
		if !errors.Is(err, retry.ErrGaveUp) || !errors.Is(err, errFlaky) {
			t.Fatalf("Do = %v, want ErrGaveUp wrapping the last error", err)
		}
		if d := time.Since(start); d != 2500*time.Millisecond {
			t.Fatalf("gave up after %v, want 2.5s: the last attempt at the limit", d)
		}
	})
}

func TestDoContextDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := tock.New()
		defer w.Stop()
		ctx, cancel := context.WithCancel(t.Context())
		time.AfterFunc(1500*time.Millisecond, cancel)
		start := time.Now()
		attempts := 0
		err := retry.Do(ctx, func(context.Context) error { attempts++; return errFlaky }, retry.WithWheel(w),
			retry.WithBackoff(retry.Constant(time.Second)))
		if !errors.Is(err, context.Canceled) || !errors.Is(err, errFlaky) || !strings.Contains(err.Error(), "after 2 attempts") {
			t.Fatalf("Do = %v, want context.Canceled after 2 attempts wrapping the last error", err)
		}
		if d := time.Since(start); d != 1500*time.Millisecond || attempts != 2 {
			t.Fatalf("returned after %v and %d attempts, want 1.5s and 2: at once when ctx is done", d, attempts)
		}
		if w.Pending() != 0 {
			t.Fatalf("wheel Pending() = %d, want 0: the wait's timer is stopped", w.Pending())
		}

		// Done before the first attempt: op is not called.
		called := false
		err = retry.Do(ctx, func(context.Context) error { called = true; return nil }, retry.WithWheel(w))
		if !errors.Is(err, context.Canceled) || called {
			t.Fatalf("Do on a done context = %v (op called: %v), want context.Canceled without a call", err, called)
		}

		// Done during an attempt: no further wait.
		ctx, cancel2 := context.WithTimeout(t.Context(), time.Second)
		defer cancel2()
		err = retry.Do(ctx, func(ctx context.Context) error { <-ctx.Done(); return ctx.Err() }, retry.WithWheel(w))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Do = %v, want context.DeadlineExceeded", err)
		}
	})
}

func TestDoAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := tock.New()
		defer w.Stop()
		start := time.Now()
		n := 0
		err := retry.Do(t.Context(), func(ctx context.Context) error {
			if n++; n < 3 {
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}, retry.WithWheel(w), retry.WithAttemptTimeout(time.Second), retry.WithBackoff(retry.Constant(time.Second)))
		if err != nil {
			t.Fatalf("Do = %v", err)
		}
		if d := time.Since(start); d != 4*time.Second {
			t.Fatalf("succeeded after %v, want 4s (two timeouts and two waits of 1s)", d)
		}
	})
}
