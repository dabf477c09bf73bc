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

// Do stops on a permanent error or when attempts or time run out, and returns an error that says
// why, which the give-up hook receives too.
func TestDoGivesUp(t *testing.T) {
	errBad := errors.New("bad")
	tests := []struct {
		name      string
		opts      []retry.Option
		op        func() error
		wantErr   []error
		wantSame  error // Do returns this very error, unwrapped
		wantMsg   string
		wantAfter time.Duration
	}{{
		name:     "permanent error is returned itself",
		op:       func() error { return retry.Permanent(errBad) },
		wantErr:  []error{errBad},
		wantSame: errBad,
		wantMsg:  "bad",
	}, {
		name:      "max attempts",
		opts:      []retry.Option{retry.WithMaxAttempts(4)},
		op:        func() error { return errFlaky },
		wantErr:   []error{retry.ErrGaveUp, errFlaky},
		wantMsg:   "retry: gave up after 4 attempts: flaky",
		wantAfter: 3 * time.Second,
	}, {
		name:      "max elapsed: the last attempt at the limit",
		opts:      []retry.Option{retry.WithMaxElapsed(2500 * time.Millisecond)},
		op:        func() error { return errFlaky },
		wantErr:   []error{retry.ErrGaveUp, errFlaky},
		wantMsg:   "retry: gave up after 4 attempts in 2.5s: flaky",
		wantAfter: 2500 * time.Millisecond,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := tock.New()
				defer w.Stop()
				var hookErr error
				opts := append([]retry.Option{retry.WithWheel(w), retry.WithBackoff(retry.Constant(time.Second)),
					retry.WithOnGiveUp(func(_ string, _ int, err error) { hookErr = err })}, tt.opts...)
				start := time.Now()
				err := retry.Do(t.Context(), func(context.Context) error { return tt.op() }, opts...)
				for _, want := range tt.wantErr {
					if !errors.Is(err, want) {
						t.Errorf("Do = %v, which is not %v", err, want)
					}
				}
				if tt.wantSame != nil && err != tt.wantSame {
					t.Errorf("Do = %#v, want the error itself, %#v", err, tt.wantSame)
				}
				if err == nil || err.Error() != tt.wantMsg {
					t.Errorf("Do = %v, want %q", err, tt.wantMsg)
				}
				if hookErr != err {
					t.Errorf("give-up hook got %v, want Do's error %v", hookErr, err)
				}
				if d := time.Since(start); d != tt.wantAfter {
					t.Errorf("gave up after %v, want %v", d, tt.wantAfter)
				}
			})
		})
	}
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
