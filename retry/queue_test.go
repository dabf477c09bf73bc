package retry_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/retry"
)

var errFlaky = errors.New("flaky")

// A record collects values from hooks and operations, which run on other goroutines than the test.
type record[T any] struct {
	mu sync.Mutex
	v  []T
}

func (r *record[T]) add(v T) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.v = append(r.v, v)
}

func (r *record[T]) get() []T {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.v)
}

// failing returns an operation that fails n times, then succeeds, recording when it ran.
func failing(n int, times *record[time.Duration], start time.Time) func(context.Context) error {
	return func(context.Context) error {
		times.add(time.Since(start))
		if len(times.get()) <= n {
			return errFlaky
		}
		return nil
	}
}

func TestQueueRetriesUntilSuccess(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := tock.New()
		defer w.Stop()
		type failure struct {
			key     string
			attempt int
			err     error
			next    time.Duration
		}
		var failures record[failure]
		q := retry.New(retry.WithWheel(w), retry.WithBackoff(retry.Constant(time.Second)),
			retry.WithOnFailure(func(key string, attempt int, err error, next time.Duration) {
				failures.add(failure{key, attempt, err, next})
			}),
			retry.WithOnGiveUp(func(key string, _ int, err error) { t.Errorf("gave up %q: %v", key, err) }))
		defer q.Close()
		start := time.Now()
		var times record[time.Duration]
		if err := q.Add("k", failing(3, &times, start)); err != nil {
			t.Fatal(err)
		}
		if q.Pending() != 1 {
			t.Fatalf("Pending() = %d, want 1", q.Pending())
		}
		time.Sleep(time.Hour)
		want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second, 4 * time.Second}
		if got := times.get(); !slices.Equal(got, want) {
			t.Fatalf("attempts at %v, want %v", got, want)
		}
		wantFailures := []failure{{"k", 1, errFlaky, time.Second}, {"k", 2, errFlaky, time.Second}, {"k", 3, errFlaky, time.Second}}
		if got := failures.get(); !slices.Equal(got, wantFailures) {
			t.Fatalf("failure hook got %v, want %v", got, wantFailures)
		}
		if q.Pending() != 0 || w.Pending() != 0 {
			t.Fatalf("after success: queue Pending() = %d, wheel Pending() = %d, want 0, 0", q.Pending(), w.Pending())
		}
		// The key may be added again once it has left.
		if err := q.Add("k", func(context.Context) error { return nil }); err != nil {
			t.Fatalf("Add after success: %v", err)
		}
	})
}

func TestQueueAddPendingKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := tock.New()
		defer w.Stop()
		q := retry.New(retry.WithWheel(w), retry.WithBackoff(retry.Constant(time.Second)))
		defer q.Close()
		var first, second atomic.Int32
		if err := q.Add("k", func(context.Context) error { first.Add(1); return errFlaky }); err != nil {
			t.Fatal(err)
		}
		err := q.Add("k", func(context.Context) error { second.Add(1); return nil })
		if !errors.Is(err, retry.ErrAlreadyPending) || !strings.Contains(err.Error(), `"k"`) {
			t.Fatalf("second Add = %v, want ErrAlreadyPending naming the key", err)
		}
		time.Sleep(1500 * time.Millisecond) // the first attempt is running or done: still pending
		if err := q.Add("k", func(context.Context) error { return nil }); !errors.Is(err, retry.ErrAlreadyPending) {
			t.Fatalf("Add while retrying = %v, want ErrAlreadyPending", err)
		}
		time.Sleep(10 * time.Second)
		if first.Load() != 11 || second.Load() != 0 {
			t.Fatalf("first op ran %d times, second %d; want 11, 0", first.Load(), second.Load())
		}
		if q.Pending() != 1 || w.Pending() != 1 {
			t.Fatalf("Pending: queue %d, wheel %d; want 1, 1: one task for the key", q.Pending(), w.Pending())
		}
	})
}

func TestQueueCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := tock.New()
		defer w.Stop()
		q := retry.New(retry.WithWheel(w), retry.WithBackoff(retry.Constant(time.Second)))
		defer q.Close()
		if q.Cancel("absent") {
			t.Fatal("Cancel of an absent key = true")
		}
		var ran atomic.Bool
		q.Add("waiting", func(context.Context) error { ran.Store(true); return nil })
		if !q.Cancel("waiting") {
			t.Fatal("Cancel of a waiting key = false")
		}
		if q.Cancel("waiting") {
			t.Fatal("second Cancel = true")
		}
		if q.Pending() != 0 || w.Pending() != 0 {
			t.Fatalf("after Cancel: queue Pending() = %d, wheel Pending() = %d; want 0, 0", q.Pending(), w.Pending())
		}

		// A running attempt: its context is canceled, and nothing follows it.
		started := make(chan struct{})
		var attempts atomic.Int32
		q.Add("running", func(ctx context.Context) error {
			attempts.Add(1)
			close(started)
			<-ctx.Done()
			return ctx.Err()
		})
		<-started
		if !q.Cancel("running") {
			t.Fatal("Cancel of a running key = false")
		}
		time.Sleep(time.Hour)
		if ran.Load() || attempts.Load() != 1 {
			t.Fatalf("canceled waiting op ran: %v; running op attempts %d, want 1", ran.Load(), attempts.Load())
		}
		if q.Pending() != 0 || w.Pending() != 0 {
			t.Fatalf("queue Pending() = %d, wheel Pending() = %d; want 0, 0", q.Pending(), w.Pending())
		}
	})
}

func TestQueueGiveUp(t *testing.T) {
	errBad := errors.New("bad request")
	tests := []struct {
		name         string
		opts         []retry.Option
		op           func(n int) error // n-th attempt
		wantAttempts int
		wantErr      []error
		wantMsg      string
		wantTimes    []time.Duration
	}{{
		name:         "max attempts",
		opts:         []retry.Option{retry.WithMaxAttempts(3)},
		op:           func(int) error { return errFlaky },
		wantAttempts: 3,
		wantErr:      []error{retry.ErrGaveUp, errFlaky},
		wantMsg:      "retry: gave up after 3 attempts: flaky",
		wantTimes:    []time.Duration{10 * time.Second, 20 * time.Second, 30 * time.Second},
	}, {
		name:         "max elapsed",
		opts:         []retry.Option{retry.WithMaxElapsed(25 * time.Second)},
		op:           func(int) error { return errFlaky },
		wantAttempts: 3,
		wantErr:      []error{retry.ErrGaveUp, errFlaky},
		wantMsg:      "retry: gave up after 3 attempts in 25s: flaky",
		wantTimes:    []time.Duration{10 * time.Second, 20 * time.Second, 25 * time.Second},
	}, {
		name:         "permanent",
		op:           func(n int) error { return retry.Permanent(fmt.Errorf("attempt %d: %w", n, errBad)) },
		wantAttempts: 1,
		wantErr:      []error{errBad},
		wantMsg:      "attempt 1: bad request",
		wantTimes:    []time.Duration{10 * time.Second},
	}, {
		name:         "panic",
		op:           func(int) error { panic("oops") },
		wantAttempts: 1,
		wantErr:      []error{retry.ErrPanicked},
		wantMsg:      "retry: operation panicked: oops",
		wantTimes:    []time.Duration{10 * time.Second},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := tock.New()
				defer w.Stop()
				type giveUp struct {
					key      string
					attempts int
					err      error
				}
				var gaveUp record[giveUp]
				opts := append([]retry.Option{retry.WithBackoff(retry.Constant(10 * time.Second)),
					retry.WithOnGiveUp(func(key string, attempts int, err error) {
						gaveUp.add(giveUp{key, attempts, err})
					})}, tt.opts...)
				q := retry.New(append(opts, retry.WithWheel(w))...)
				defer q.Close()
				start := time.Now()
				var times record[time.Duration]
				q.Add("k", func(context.Context) error {
					times.add(time.Since(start))
					return tt.op(len(times.get()))
				})
				time.Sleep(time.Hour)
				g := gaveUp.get()
				if len(g) != 1 {
					t.Fatalf("give-up hook called %d times, want once", len(g))
				}
				gotKey, gotAttempts, gotErr := g[0].key, g[0].attempts, g[0].err
				if gotKey != "k" || gotAttempts != tt.wantAttempts {
					t.Fatalf("give-up hook got key %q after %d attempts, want %q after %d", gotKey, gotAttempts, "k", tt.wantAttempts)
				}
				for _, want := range tt.wantErr {
					if !errors.Is(gotErr, want) {
						t.Errorf("give-up error %v is not %v", gotErr, want)
					}
				}
				if !strings.HasPrefix(gotErr.Error(), tt.wantMsg) {
					t.Errorf("give-up error %q, want it to start with %q", gotErr, tt.wantMsg)
				}
				if got := times.get(); !slices.Equal(got, tt.wantTimes) {
					t.Errorf("attempts at %v, want %v", got, tt.wantTimes)
				}
				if q.Pending() != 0 || w.Pending() != 0 {
					t.Fatalf("queue Pending() = %d, wheel Pending() = %d; want 0, 0", q.Pending(), w.Pending())
				}
			})
		})
	}
}

func TestQueueFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := tock.New()
		defer w.Stop()
		var overflowed []string
		q := retry.New(retry.WithWheel(w), retry.WithMaxPending(2), retry.WithBackoff(retry.Constant(time.Second)),
			retry.WithOnOverflow(func(key string) { overflowed = append(overflowed, key) }))
		defer q.Close()
		ok := func(context.Context) error { return nil }
		for _, k := range []string{"a", "b"} {
			if err := q.Add(k, ok); err != nil {
				t.Fatal(err)
			}
		}
		err := q.Add("c", ok)
		if !errors.Is(err, retry.ErrFull) || !strings.Contains(err.Error(), `"c"`) {
			t.Fatalf("Add beyond the bound = %v, want ErrFull naming the key", err)
		}
		if !slices.Equal(overflowed, []string{"c"}) {
			t.Fatalf("overflow hook got %v, want [c]", overflowed)
		}
		time.Sleep(2 * time.Second) // a and b succeed and leave
		if err := q.Add("c", ok); err != nil {
			t.Fatalf("Add after keys left: %v", err)
		}
	})
}

// A slow operation holds a worker, not the wheel: other timers keep firing, other keys run on the
// other workers, and no more than WithWorkers attempts run at once.
func TestQueueWorkers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := tock.New()
		defer w.Stop()
		q := retry.New(retry.WithWheel(w), retry.WithWorkers(2), retry.WithBackoff(retry.Constant(time.Second)))
		defer q.Close()
		release := make(chan struct{})
		var running, peak, done atomic.Int32
		for i := range 6 {
			q.Add(fmt.Sprint(i), func(context.Context) error {
				n := running.Add(1)
				defer running.Add(-1)
				for {
					p := peak.Load()
					if n <= p || peak.CompareAndSwap(p, n) {
						break
					}
				}
				if i < 2 {
					<-release // the first two block
				}
				done.Add(1)
				return nil
			})
			time.Sleep(time.Millisecond) // keys 0 and 1 come due first
		}
		var fired atomic.Bool
		w.AfterFunc(2*time.Second, func() { fired.Store(true) })
		time.Sleep(time.Minute)
		if !fired.Load() {
			t.Fatal("a wheel timer did not fire while workers were blocked")
		}
		if done.Load() != 0 || running.Load() != 2 {
			t.Fatalf("%d done, %d running; want 0, 2: two workers, both blocked", done.Load(), running.Load())
		}
		close(release)
		synctest.Wait()
		if done.Load() != 6 || peak.Load() != 2 {
			t.Fatalf("%d done, peak %d running; want 6, 2", done.Load(), peak.Load())
		}
	})
}

// Waiting keys hold no goroutine, and workers exit when no attempt is due.
func TestQueueNoGoroutinePerKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := tock.New()
		defer w.Stop()
		q := retry.New(retry.WithWheel(w), retry.WithBackoff(retry.Constant(time.Minute)))
		defer q.Close()
		var succeeded atomic.Int32
		for i := range 1000 {
			q.Add(fmt.Sprint(i), func(context.Context) error { succeeded.Add(1); return nil })
		}
		synctest.Wait()
		if n := goroutinesIn("tockwheel/tock"); n > runtime.GOMAXPROCS(0) {
			t.Fatalf("%d goroutines of the wheel and queue for 1000 waiting keys; want at most the wheel's drivers (%d)", n, runtime.GOMAXPROCS(0))
		}
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if succeeded.Load() != 1000 {
			t.Fatalf("%d succeeded, want 1000", succeeded.Load())
		}
		if n := goroutinesIn("tockwheel/tock"); n != 0 {
			t.Fatalf("%d goroutines of the wheel and queue once idle, want 0", n)
		}
	})
}

// goroutinesIn counts the goroutines with a function of the named package on their stack.
func goroutinesIn(pkg string) int {
	buf := make([]byte, 1<<20)
	n := 0
	for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		if strings.Contains(g, pkg) && !strings.Contains(g, "_test.") {
			n++
		}
	}
	return n
}

func TestQueueClose(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := tock.New()
		defer w.Stop()
		var gaveUp record[string]
		q := retry.New(retry.WithWheel(w), retry.WithBackoff(retry.Constant(time.Second)),
			retry.WithOnGiveUp(func(key string, _ int, _ error) { gaveUp.add(key) }))
		fail := func(context.Context) error { return errFlaky }
		q.Add("waiting-b", fail)
		q.Add("waiting-a", fail)
		stuck := func(succeed bool) func(context.Context) error {
			return func(ctx context.Context) error {
				<-ctx.Done()
				time.Sleep(time.Second) // Close must wait for this
				if succeed {
					return nil
				}
				return ctx.Err()
			}
		}
		time.Sleep(time.Minute)
		q.Add("running-ok", stuck(true))
		q.Add("running-fail", stuck(false))
		time.Sleep(1500 * time.Millisecond)
		start := time.Now()
		keys := q.Close()
		if d := time.Since(start); d != time.Second {
			t.Fatalf("Close returned after %v, want 1s: it waits for running attempts", d)
		}
		if want := []string{"running-fail", "waiting-a", "waiting-b"}; !slices.Equal(keys, want) {
			t.Fatalf("Close() = %v, want %v", keys, want)
		}
		if g := gaveUp.get(); len(g) != 0 {
			t.Fatalf("give-up hook called for %v by Close", g)
		}
		if err := q.Add("x", fail); !errors.Is(err, retry.ErrClosed) {
			t.Fatalf("Add after Close = %v, want ErrClosed", err)
		}
		if keys := q.Close(); keys != nil {
			t.Fatalf("second Close() = %v, want nil", keys)
		}
		if q.Pending() != 0 || w.Pending() != 0 {
			t.Fatalf("after Close: queue Pending() = %d, wheel Pending() = %d; want 0, 0", q.Pending(), w.Pending())
		}
	})
}

func TestQueueAttemptTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := tock.New()
		defer w.Stop()
		var errs record[error]
		q := retry.New(retry.WithWheel(w), retry.WithBackoff(retry.Constant(time.Second)), retry.WithAttemptTimeout(5*time.Second),
			retry.WithMaxAttempts(2), retry.WithOnFailure(func(_ string, _ int, err error, _ time.Duration) { errs.add(err) }),
			retry.WithOnGiveUp(func(_ string, _ int, err error) { errs.add(err) }))
		defer q.Close()
		var times record[time.Duration]
		start := time.Now()
		q.Add("k", func(ctx context.Context) error {
			<-ctx.Done()
			times.add(time.Since(start))
			return ctx.Err()
		})
		time.Sleep(time.Hour)
		if e := errs.get(); len(e) != 2 || !errors.Is(e[0], context.DeadlineExceeded) || !errors.Is(e[1], retry.ErrGaveUp) {
			t.Fatalf("hooks got %v, want a deadline then giving up", e)
		}
		if got, want := times.get(), []time.Duration{6 * time.Second, 12 * time.Second}; !slices.Equal(got, want) {
			t.Fatalf("attempts timed out at %v, want %v", got, want)
		}
	})
}

// Hooks run without the queue's lock: they may use the queue, here to add the key again.
func TestQueueHookReAdds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := tock.New()
		defer w.Stop()
		var q *retry.Queue
		var readds atomic.Int32
		op := func(context.Context) error { return errFlaky }
		q = retry.New(retry.WithWheel(w), retry.WithBackoff(retry.Constant(time.Second)), retry.WithMaxAttempts(1),
			retry.WithOnFailure(func(key string, _ int, _ error, _ time.Duration) { q.Cancel("other") }),
			retry.WithOnGiveUp(func(key string, _ int, _ error) {
				if readds.Add(1) < 3 {
					if err := q.Add(key, op); err != nil {
						t.Errorf("re-Add from the hook: %v", err)
					}
				}
			}))
		defer q.Close()
		q.Add("k", op)
		time.Sleep(time.Minute)
		if readds.Load() != 3 {
			t.Fatalf("give-up hook ran %d times, want 3", readds.Load())
		}
	})
}

// A failure hook that cancels its own key ends the retries: the attempt it reports on has no
// context left to cancel, and no next attempt is scheduled.
func TestQueueHookCancelsOwnKey(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := tock.New()
		defer w.Stop()
		var q *retry.Queue
		var canceled atomic.Bool
		q = retry.New(retry.WithWheel(w), retry.WithBackoff(retry.Constant(time.Second)),
			retry.WithOnFailure(func(key string, _ int, _ error, _ time.Duration) { canceled.Store(q.Cancel(key)) }))
		defer q.Close()
		var attempts atomic.Int32
		q.Add("k", func(context.Context) error { attempts.Add(1); return errFlaky })
		time.Sleep(time.Minute)
		if !canceled.Load() || attempts.Load() != 1 {
			t.Fatalf("Cancel from the hook = %v, attempts %d; want true, 1", canceled.Load(), attempts.Load())
		}
		if q.Pending() != 0 || w.Pending() != 0 {
			t.Fatalf("queue Pending() = %d, wheel Pending() = %d; want 0, 0", q.Pending(), w.Pending())
		}
	})
}

func TestQueueWheelRefuses(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		full := tock.New(tock.WithMaxPending(1))
		defer full.Stop()
		q := retry.New(retry.WithWheel(full))
		defer q.Close()
		ok := func(context.Context) error { return nil }
		if err := q.Add("a", ok); err != nil {
			t.Fatal(err)
		}
		if err := q.Add("b", ok); !errors.Is(err, tock.ErrTooManyPending) || q.Pending() != 1 {
			t.Fatalf("Add on a full wheel = %v (Pending %d), want tock.ErrTooManyPending and no key added", err, q.Pending())
		}

		// The wheel stops between attempts: the key is given up, with both reasons.
		w := tock.New()
		var gotErrs record[error]
		q2 := retry.New(retry.WithWheel(w), retry.WithBackoff(retry.Constant(time.Second)),
			retry.WithOnGiveUp(func(_ string, _ int, err error) { gotErrs.add(err) }))
		defer q2.Close()
		q2.Add("k", func(context.Context) error { w.Stop(); return errFlaky })
		time.Sleep(time.Minute)
		var gotErr error
		if e := gotErrs.get(); len(e) == 1 {
			gotErr = e[0]
		}
		if !errors.Is(gotErr, retry.ErrGaveUp) || !errors.Is(gotErr, tock.ErrStopped) || !errors.Is(gotErr, errFlaky) {
			t.Fatalf("give-up error = %v, want ErrGaveUp, tock.ErrStopped and the last error", gotErr)
		}
		if q2.Pending() != 0 {
			t.Fatalf("Pending() = %d, want 0", q2.Pending())
		}
		if err := q2.Add("k", ok); !errors.Is(err, tock.ErrStopped) {
			t.Fatalf("Add on a stopped wheel = %v, want tock.ErrStopped", err)
		}
	})
}

// TestQueueConcurrent races Add, Cancel, attempts and Close; run it with -race. Every key must end
// either succeeded, canceled, or returned by Close, exactly once.
func TestQueueConcurrent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := tock.New()
		defer w.Stop()
		var succeeded sync.Map
		q := retry.New(retry.WithWheel(w), retry.WithWorkers(4), retry.WithBackoff(retry.Exponential(time.Millisecond, 10*time.Millisecond)))
		var canceled sync.Map
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for i := range 100 {
					key := fmt.Sprintf("%d-%d", g, i)
					n := 0
					err := q.Add(key, func(context.Context) error {
						n++
						if n < 3 {
							return errFlaky
						}
						succeeded.Store(key, true)
						return nil
					})
					if err != nil {
						t.Errorf("Add(%q): %v", key, err)
					}
					if i%3 == 0 {
						time.Sleep(time.Duration(i%7) * time.Millisecond)
						if q.Cancel(key) {
							canceled.Store(key, true)
						}
					}
				}
			})
		}
		wg.Wait()
		time.Sleep(15 * time.Millisecond)
		left := q.Close()
		for g := range 4 {
			for i := range 100 {
				key := fmt.Sprintf("%d-%d", g, i)
				_, s := succeeded.Load(key)
				_, c := canceled.Load(key)
				l := slices.Contains(left, key)
				if !s && !c && !l || s && l || c && l {
					t.Errorf("key %s: succeeded %v, canceled %v, left at Close %v", key, s, c, l)
				}
			}
		}
	})
}

// The queue behaves the same whichever executor runs the wheel's callbacks.
func TestQueueExecutors(t *testing.T) {
	for name, opt := range map[string]tock.Option{
		"pool":      tock.WithPoolExecutor(2),
		"inline":    tock.WithInlineExecutor(),
		"goroutine": tock.WithGoroutineExecutor(),
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := tock.New(opt)
				defer w.Stop()
				q := retry.New(retry.WithWheel(w), retry.WithBackoff(retry.Constant(time.Second)), retry.WithWorkers(3))
				defer q.Close()
				start := time.Now()
				times := make([]record[time.Duration], 20)
				for i := range times {
					if err := q.Add(fmt.Sprint(i), failing(2, &times[i], start)); err != nil {
						t.Fatal(err)
					}
				}
				time.Sleep(time.Minute)
				want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}
				for i := range times {
					if got := times[i].get(); !slices.Equal(got, want) {
						t.Fatalf("key %d: attempts at %v, want %v", i, got, want)
					}
				}
				if q.Pending() != 0 || w.Pending() != 0 {
					t.Fatalf("queue Pending() = %d, wheel Pending() = %d; want 0, 0", q.Pending(), w.Pending())
				}
			})
		})
	}
}
