package tock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// isDone reports whether ctx's Done channel is closed.
func isDone(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// checkDone fails t unless ctx is done with err and cause.
func checkDone(t *testing.T, ctx context.Context, err, cause error) {
	t.Helper()
	if !isDone(ctx) {
		t.Fatalf("Done not closed; want done with %v", err)
	}
	if got := ctx.Err(); got != err {
		t.Fatalf("Err() = %v, want %v", got, err)
	}
	if got := context.Cause(ctx); got != cause {
		t.Fatalf("Cause() = %v, want %v", got, cause)
	}
}

// checkNotDone fails t if ctx is done.
func checkNotDone(t *testing.T, ctx context.Context) {
	t.Helper()
	if isDone(ctx) {
		t.Fatalf("Done closed early (Err %v)", ctx.Err())
	}
	if err := ctx.Err(); err != nil {
		t.Fatalf("Err() = %v before done", err)
	}
	if cause := context.Cause(ctx); cause != nil {
		t.Fatalf("Cause() = %v before done", cause)
	}
}

// watchers counts the goroutines with which the context package watches parents it does not know.
func watchers() int {
	buf := make([]byte, 1<<20)
	n := 0
	for g := range strings.SplitSeq(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
		for line := range strings.SplitSeq(g, "\n") {
			if strings.HasPrefix(line, "context.(*cancelCtx).propagateCancel.func") {
				n++
				break
			}
		}
	}
	return n
}

// children returns the number of children and AfterFunc registrations of a wheel context.
func children(ctx context.Context) int {
	c := ctx.(*deadlineCtx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.extra == nil {
		return 0
	}
	return len(c.extra.children)
}

func TestWithTimeoutExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		start := time.Now()
		ctx, cancel := w.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		if dl, ok := ctx.Deadline(); !ok || !dl.Equal(start.Add(100*time.Millisecond)) {
			t.Fatalf("Deadline() = %v, %v; want %v, true", dl, ok, start.Add(100*time.Millisecond))
		}
		if w.Pending() != 1 {
			t.Fatalf("Pending() = %d, want 1", w.Pending())
		}
		time.Sleep(100*time.Millisecond - time.Nanosecond)
		synctest.Wait()
		checkNotDone(t, ctx)
		<-ctx.Done()
		if d := time.Since(start); d < 100*time.Millisecond || d > 100*time.Millisecond+DefaultTick {
			t.Fatalf("done after %v, want 100ms to 100ms+tick", d)
		}
		checkDone(t, ctx, context.DeadlineExceeded, context.DeadlineExceeded)
		cancel() // after expiry: no change
		checkDone(t, ctx, context.DeadlineExceeded, context.DeadlineExceeded)
		if w.Pending() != 0 {
			t.Fatalf("Pending() = %d after expiry, want 0", w.Pending())
		}
	})
}

// Wheel contexts behave the same whichever executor runs the wheel's callbacks.
func TestWithTimeoutExecutors(t *testing.T) {
	for name, opt := range map[string]Option{
		"pool":      WithPoolExecutor(2),
		"inline":    WithInlineExecutor(),
		"goroutine": WithGoroutineExecutor(),
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				w := New(opt)
				defer w.Stop()
				start := time.Now()
				parent, pcancel := w.WithTimeout(context.Background(), time.Hour)
				defer pcancel()
				var ctxs []context.Context
				for i := range 100 {
					ctx, cancel := w.WithTimeout(parent, time.Duration(i+1)*time.Millisecond)
					defer cancel()
					ctxs = append(ctxs, ctx)
					if i%2 == 1 {
						cancel()
					}
				}
				for i, ctx := range ctxs {
					<-ctx.Done()
					if i%2 == 1 {
						checkDone(t, ctx, context.Canceled, context.Canceled)
						continue
					}
					if d := time.Since(start); d < time.Duration(i+1)*time.Millisecond {
						t.Fatalf("context %d done after %v, before its deadline", i, d)
					}
					checkDone(t, ctx, context.DeadlineExceeded, context.DeadlineExceeded)
				}
				synctest.Wait() // a child leaves its parent just after closing its done channel
				if n := children(parent); n != 0 {
					t.Fatalf("parent keeps %d children, want 0", n)
				}
			})
		})
	}
}

func TestWithTimeoutCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		ctx, cancel := w.WithTimeout(context.Background(), time.Hour)
		done := ctx.Done() // a channel made before the cancel must be closed by it
		cancel()
		select {
		case <-done:
		default:
			t.Fatal("Done channel made before cancel not closed by it")
		}
		checkDone(t, ctx, context.Canceled, context.Canceled)
		if w.Pending() != 0 {
			t.Fatalf("Pending() = %d after cancel, want 0: the timer must be stopped", w.Pending())
		}
		cancel()
		time.Sleep(2 * time.Hour)
		checkDone(t, ctx, context.Canceled, context.Canceled)
	})
}

// A cancel called after the deadline passed but before anyone looked is still a cancel if it
// stopped the timer, and a deadline if the timer fired first: the wheel decides.
func TestWithTimeoutCancelAtDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		ctx, cancel := w.WithTimeout(context.Background(), time.Millisecond)
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		cancel()
		checkDone(t, ctx, context.DeadlineExceeded, context.DeadlineExceeded)
	})
}

func TestWithDeadlineInThePast(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		for _, d := range []time.Duration{0, -time.Nanosecond, -time.Hour} {
			ctx, cancel := w.WithTimeout(context.Background(), d)
			checkDone(t, ctx, context.DeadlineExceeded, context.DeadlineExceeded)
			cancel()
			checkDone(t, ctx, context.DeadlineExceeded, context.DeadlineExceeded)
			ctx, cancel = w.WithDeadline(context.Background(), time.Now().Add(d))
			checkDone(t, ctx, context.DeadlineExceeded, context.DeadlineExceeded)
			cancel()
		}
		if w.Pending() != 0 {
			t.Fatalf("Pending() = %d, want 0: a past deadline needs no timer", w.Pending())
		}
	})
}

func TestWithDeadlineFarFuture(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		far := time.Now().Add(1<<63 - 1)
		ctx, cancel := w.WithDeadline(context.Background(), far)
		if dl, _ := ctx.Deadline(); !dl.Equal(far) {
			t.Fatalf("Deadline() = %v, want %v", dl, far)
		}
		time.Sleep(24 * 365 * time.Hour)
		checkNotDone(t, ctx)
		cancel()
		checkDone(t, ctx, context.Canceled, context.Canceled)
		ctx, cancel = w.WithTimeout(context.Background(), 1<<63-1)
		checkNotDone(t, ctx)
		cancel()
	})
}

type key string

func TestWithTimeoutValues(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		parent := context.WithValue(context.Background(), key("a"), 1)
		ctx, cancel := w.WithTimeout(parent, time.Second)
		defer cancel()
		ctx = context.WithValue(ctx, key("b"), 2)
		ctx2, cancel2 := w.WithTimeout(ctx, time.Second)
		defer cancel2()
		if v := ctx2.Value(key("a")); v != 1 {
			t.Fatalf("Value(a) = %v, want 1", v)
		}
		if v := ctx2.Value(key("b")); v != 2 {
			t.Fatalf("Value(b) = %v, want 2", v)
		}
		if v := ctx2.Value(key("c")); v != nil {
			t.Fatalf("Value(c) = %v, want nil", v)
		}
	})
}

func TestParentDeadlineEarlier(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		parent, pcancel := context.WithTimeout(context.Background(), time.Second)
		defer pcancel()
		pdl, _ := parent.Deadline()
		ctx, cancel := w.WithTimeout(parent, time.Hour)
		defer cancel()
		if dl, ok := ctx.Deadline(); !ok || !dl.Equal(pdl) {
			t.Fatalf("Deadline() = %v, %v; want parent's %v", dl, ok, pdl)
		}
		if w.Pending() != 0 {
			t.Fatalf("Pending() = %d, want 0: parent's deadline rules", w.Pending())
		}
		time.Sleep(time.Second)
		synctest.Wait()
		checkDone(t, ctx, context.DeadlineExceeded, context.DeadlineExceeded)

		// The same with a cancel before the parent's deadline.
		parent, pcancel = context.WithTimeout(context.Background(), time.Second)
		defer pcancel()
		ctx, cancel = w.WithTimeout(parent, time.Hour)
		cancel()
		checkDone(t, ctx, context.Canceled, context.Canceled)
		checkNotDone(t, parent)
	})
}

func TestStdParentCanceled(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		parent, pcancel := context.WithCancel(context.Background())
		ctx, cancel := w.WithTimeout(parent, time.Hour)
		defer cancel()
		checkNotDone(t, ctx)
		pcancel()
		synctest.Wait()
		checkDone(t, ctx, context.Canceled, context.Canceled)
		if w.Pending() != 0 {
			t.Fatalf("Pending() = %d, want 0: a canceled child stops its timer", w.Pending())
		}
	})
}

func TestStdParentCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		errBoom := errors.New("boom")
		parent, pcancel := context.WithCancelCause(context.Background())
		ctx, cancel := w.WithTimeout(parent, time.Hour)
		defer cancel()
		// A wheel context below a standard one reports its own state to context.Cause.
		checkNotDone(t, ctx)
		pcancel(errBoom)
		synctest.Wait()
		checkDone(t, ctx, context.Canceled, errBoom)

		// Expiry under a live standard parent: the cause is DeadlineExceeded, not nil.
		parent, pcancel = context.WithCancelCause(context.Background())
		defer pcancel(nil)
		ctx, cancel = w.WithTimeout(parent, time.Second)
		defer cancel()
		time.Sleep(2 * time.Second)
		checkDone(t, ctx, context.DeadlineExceeded, context.DeadlineExceeded)
		// A later cause on the parent does not change the child.
		pcancel(errBoom)
		synctest.Wait()
		checkDone(t, ctx, context.DeadlineExceeded, context.DeadlineExceeded)
	})
}

// A cancel that comes after a standard parent was canceled, but perhaps before context.AfterFunc's
// goroutine reached the child, reports the parent's error, as a standard child would.
func TestCancelAfterStdParentDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		errBoom := errors.New("boom")
		parent, pcancel := context.WithCancelCause(context.Background())
		ctx, cancel := w.WithTimeout(parent, time.Hour)
		pcancel(errBoom)
		cancel()
		checkDone(t, ctx, context.Canceled, errBoom)
		synctest.Wait()
		checkDone(t, ctx, context.Canceled, errBoom)
		if w.Pending() != 0 {
			t.Fatalf("Pending() = %d, want 0", w.Pending())
		}
	})
}

func TestStdParentAlreadyDone(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		errBoom := errors.New("boom")
		parent, pcancel := context.WithCancelCause(context.Background())
		pcancel(errBoom)
		ctx, cancel := w.WithTimeout(parent, time.Hour)
		checkDone(t, ctx, context.Canceled, errBoom)
		cancel()
		checkDone(t, ctx, context.Canceled, errBoom)
		if w.Pending() != 0 {
			t.Fatalf("Pending() = %d, want 0", w.Pending())
		}

		expired, ecancel := context.WithTimeout(context.Background(), -1)
		defer ecancel()
		ctx, cancel = w.WithTimeout(expired, time.Hour)
		defer cancel()
		checkDone(t, ctx, context.DeadlineExceeded, context.DeadlineExceeded)
	})
}

func TestWheelParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		parent, pcancel := w.WithTimeout(context.Background(), time.Hour)
		child, ccancel := w.WithTimeout(parent, 2*time.Hour) // parent's deadline rules
		defer ccancel()
		child2, c2cancel := w.WithTimeout(parent, time.Minute)
		defer c2cancel()
		valued := context.WithValue(parent, key("k"), "v")
		child3, c3cancel := w.WithTimeout(valued, time.Minute) // found beneath WithValue
		defer c3cancel()
		if n := children(parent); n != 3 {
			t.Fatalf("parent has %d children, want 3: wheel parents link children directly", n)
		}
		if w.Pending() != 3 {
			t.Fatalf("Pending() = %d, want 3", w.Pending())
		}
		pcancel()
		for _, c := range []context.Context{parent, child, child2, child3} {
			checkDone(t, c, context.Canceled, context.Canceled) // synchronously, no goroutine
		}
		if w.Pending() != 0 {
			t.Fatalf("Pending() = %d, want 0", w.Pending())
		}
	})
}

func TestWheelParentExpires(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		errSlow := errors.New("slow")
		parent, pcancel := w.WithTimeoutCause(context.Background(), time.Second, errSlow)
		defer pcancel()
		child, ccancel := w.WithTimeout(parent, time.Minute)
		defer ccancel()
		std, scancel := context.WithCancel(child)
		defer scancel()
		time.Sleep(time.Second)
		synctest.Wait()
		checkDone(t, parent, context.DeadlineExceeded, errSlow)
		checkDone(t, child, context.DeadlineExceeded, errSlow)
		checkDone(t, std, context.DeadlineExceeded, errSlow)

		// A child made after its wheel parent is done is done at once.
		late, lcancel := w.WithTimeout(parent, time.Minute)
		defer lcancel()
		checkDone(t, late, context.DeadlineExceeded, errSlow)
	})
}

func TestChildLeavesWheelParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		parent, pcancel := w.WithTimeout(context.Background(), time.Hour)
		defer pcancel()
		for range 10 {
			_, cancel := w.WithTimeout(parent, time.Minute)
			cancel()
		}
		_, cancel := w.WithTimeout(context.WithValue(parent, key("k"), 1), time.Second)
		defer cancel()
		time.Sleep(time.Second)
		synctest.Wait()
		if n := children(parent); n != 0 {
			t.Fatalf("parent keeps %d children after they were canceled or expired, want 0", n)
		}
		checkNotDone(t, parent)
	})
}

func TestStdChildOfWheelContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		ctx, cancel := w.WithTimeout(context.Background(), time.Hour)
		std, scancel := context.WithCancel(ctx)
		defer scancel()
		if n := children(ctx); n != 1 {
			t.Fatalf("wheel context has %d registrations, want 1: context.WithCancel must use its AfterFunc method", n)
		}
		scancel()
		if n := children(ctx); n != 0 {
			t.Fatalf("wheel context keeps %d registrations after the child was canceled, want 0", n)
		}
		std, scancel = context.WithCancel(ctx)
		defer scancel()
		cancel()
		checkDone(t, std, context.Canceled, context.Canceled)
	})
}

func TestContextAfterFunc(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		ctx, cancel := w.WithTimeout(context.Background(), time.Second)
		defer cancel()
		ran := make(chan struct{})
		context.AfterFunc(ctx, func() { close(ran) })
		stopped := false
		stop := context.AfterFunc(ctx, func() { stopped = true })
		if !stop() {
			t.Fatal("stop() = false before the context was done")
		}
		if stop() {
			t.Fatal("second stop() = true")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		select {
		case <-ran:
		default:
			t.Fatal("AfterFunc did not run after the deadline")
		}
		if stopped {
			t.Fatal("a stopped AfterFunc ran")
		}
		// On a done context: runs at once, stop reports false.
		ran2 := make(chan struct{})
		stop = context.AfterFunc(ctx, func() { close(ran2) })
		synctest.Wait()
		select {
		case <-ran2:
		default:
			t.Fatal("AfterFunc on a done context did not run")
		}
		if stop() {
			t.Fatal("stop() = true after the function ran")
		}
	})
}

// A context of a kind the context package does not know, with its own done channel: the child must
// follow it, through context.AfterFunc's goroutine.
type customCtx struct {
	context.Context
	done chan struct{}
}

func (c *customCtx) Done() <-chan struct{} { return c.done }
func (c *customCtx) Err() error {
	select {
	case <-c.done:
		return context.Canceled
	default:
		return nil
	}
}

func TestCustomParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		// A custom context wrapping a wheel context must not be bypassed.
		inner, icancel := w.WithTimeout(context.Background(), time.Hour)
		defer icancel()
		parent := &customCtx{Context: inner, done: make(chan struct{})}
		ctx, cancel := w.WithTimeout(parent, time.Minute)
		defer cancel()
		if n := children(inner); n != 0 {
			t.Fatalf("child linked to a wheel context behind a custom one (%d children)", n)
		}
		close(parent.done)
		synctest.Wait()
		checkDone(t, ctx, context.Canceled, context.Canceled)
		checkNotDone(t, inner)

		// Canceling the child ends the goroutine that watched the parent.
		parent = &customCtx{Context: context.Background(), done: make(chan struct{})}
		ctx, cancel = w.WithTimeout(parent, time.Minute)
		_ = ctx.Done()
		cancel()
		synctest.Wait()
		if n := watchers(); n != 0 {
			t.Fatalf("%d goroutines watch a parent after cancel, want 0", n)
		}
	})
}

// Under a foreign parent, a context registers with it only when something needs the parent's end
// to reach it: here Done, with a parent whose registration is a goroutine that can be counted.
func TestForeignParentRegistersLazily(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		parent := &customCtx{Context: context.Background(), done: make(chan struct{})}
		ctx, cancel := w.WithTimeout(parent, time.Minute)
		synctest.Wait()
		if n := watchers(); n != 0 {
			t.Fatalf("%d goroutines watch the parent after WithTimeout, want 0: no registration yet", n)
		}
		checkNotDone(t, ctx)
		_ = ctx.Done()
		synctest.Wait()
		if n := watchers(); n != 1 {
			t.Fatalf("%d goroutines watch the parent after Done, want 1: registered", n)
		}
		cancel()
		synctest.Wait()
		if n := watchers(); n != 0 {
			t.Fatalf("%d goroutines watch the parent after cancel, want 0", n)
		}

		// Unregistered, a context still reports its parent's end through Err and Cause.
		parent = &customCtx{Context: context.Background(), done: make(chan struct{})}
		ctx, cancel = w.WithTimeout(parent, time.Minute)
		defer cancel()
		close(parent.done)
		if err := ctx.Err(); err != context.Canceled {
			t.Fatalf("Err() = %v after the parent was done, want context.Canceled", err)
		}
		checkDone(t, ctx, context.Canceled, context.Canceled)
		if w.Pending() != 0 {
			t.Fatalf("Pending() = %d, want 0: adopting the parent's end stops the timer", w.Pending())
		}
	})
}

func TestWithTimeoutCause(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		errSlow := errors.New("slow")
		ctx, cancel := w.WithTimeoutCause(context.Background(), time.Second, errSlow)
		time.Sleep(time.Second)
		synctest.Wait()
		checkDone(t, ctx, context.DeadlineExceeded, errSlow)
		cancel()
		checkDone(t, ctx, context.DeadlineExceeded, errSlow)

		ctx, cancel = w.WithDeadlineCause(context.Background(), time.Now().Add(time.Second), errSlow)
		cancel() // the cancel function does not set the cause
		checkDone(t, ctx, context.Canceled, context.Canceled)

		ctx, cancel = w.WithDeadlineCause(context.Background(), time.Now().Add(-time.Second), errSlow)
		defer cancel()
		checkDone(t, ctx, context.DeadlineExceeded, errSlow)
	})
}

// When the wheel refuses the timer, a runtime timer keeps the deadline.
func TestFallbackTimer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		full := New(WithMaxPending(1))
		defer full.Stop()
		if _, err := full.AfterFunc(time.Hour, func() {}); err != nil {
			t.Fatal(err)
		}
		stopped := New()
		stopped.Stop()
		var none *Wheel
		for name, w := range map[string]*Wheel{"full": full, "stopped": stopped, "nil": none} {
			start := time.Now()
			ctx, cancel := w.WithTimeout(context.Background(), time.Second)
			<-ctx.Done()
			if d := time.Since(start); d != time.Second {
				t.Errorf("%s: done after %v, want 1s", name, d)
			}
			checkDone(t, ctx, context.DeadlineExceeded, context.DeadlineExceeded)
			cancel()
			checkDone(t, ctx, context.DeadlineExceeded, context.DeadlineExceeded)

			ctx, cancel = w.WithTimeout(context.Background(), time.Second)
			cancel()
			checkDone(t, ctx, context.Canceled, context.Canceled)
			time.Sleep(2 * time.Second)
			checkDone(t, ctx, context.Canceled, context.Canceled)

			parent, pcancel := context.WithCancel(context.Background())
			ctx, cancel = w.WithTimeout(parent, time.Second)
			pcancel()
			synctest.Wait()
			checkDone(t, ctx, context.Canceled, context.Canceled)
			cancel()
		}
	})
}

func TestNilParentPanics(t *testing.T) {
	w := New()
	defer w.Stop()
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "nil parent") {
			t.Fatalf("recover() = %v, want a panic about the nil parent", r)
		}
	}()
	//lint:ignore SA1012 the nil parent is the point
	w.WithTimeout(nil, time.Second) //nolint:staticcheck
}

func TestString(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		ctx, cancel := w.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if s := fmt.Sprint(ctx); !strings.HasPrefix(s, "context.Background.WithDeadline(") || !strings.Contains(s, "[1s]") {
			t.Fatalf("String() = %q", s)
		}
	})
}

// TestLikeStd runs the same scenarios with context.WithTimeout and a wheel's WithTimeout and
// compares everything observable at each step.
func TestLikeStd(t *testing.T) {
	type withTimeout func(context.Context, time.Duration) (context.Context, context.CancelFunc)
	errBoom := errors.New("boom")
	type observed struct {
		done       bool
		err, cause error
		deadline   time.Duration // from the scenario's start
		hasDL      bool
	}
	scenarios := []struct {
		name string
		run  func(wt withTimeout, look func(context.Context))
	}{
		{"expire", func(wt withTimeout, look func(context.Context)) {
			ctx, cancel := wt(context.Background(), time.Second)
			defer cancel()
			look(ctx)
			time.Sleep(time.Second + DefaultTick)
			look(ctx)
		}},
		{"cancel", func(wt withTimeout, look func(context.Context)) {
			ctx, cancel := wt(context.Background(), time.Second)
			cancel()
			look(ctx)
			time.Sleep(2 * time.Second)
			look(ctx)
		}},
		{"parent cause", func(wt withTimeout, look func(context.Context)) {
			p, pc := context.WithCancelCause(context.Background())
			ctx, cancel := wt(p, time.Second)
			defer cancel()
			pc(errBoom)
			time.Sleep(time.Millisecond)
			look(ctx)
		}},
		{"parent earlier", func(wt withTimeout, look func(context.Context)) {
			p, pc := context.WithTimeoutCause(context.Background(), time.Second, errBoom)
			defer pc()
			ctx, cancel := wt(p, time.Hour)
			defer cancel()
			look(ctx)
			time.Sleep(time.Second + DefaultTick)
			look(ctx)
		}},
		{"nested", func(wt withTimeout, look func(context.Context)) {
			p, pc := wt(context.Background(), 2*time.Second)
			defer pc()
			ctx, cancel := wt(context.WithValue(p, key("k"), 1), 3*time.Second)
			defer cancel()
			c2, cancel2 := wt(p, time.Second)
			defer cancel2()
			look(ctx)
			time.Sleep(time.Second + DefaultTick)
			look(c2)
			look(ctx)
			time.Sleep(time.Second)
			look(ctx)
		}},
		{"std child", func(wt withTimeout, look func(context.Context)) {
			p, pc := wt(context.Background(), time.Second)
			defer pc()
			ctx, cancel := context.WithCancelCause(p)
			defer cancel(nil)
			look(ctx)
			pc()
			time.Sleep(time.Millisecond)
			look(ctx)
		}},
		{"negative", func(wt withTimeout, look func(context.Context)) {
			ctx, cancel := wt(context.Background(), -time.Second)
			defer cancel()
			look(ctx)
		}},
	}
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			var want, got []observed
			record := func(obs *[]observed, wt withTimeout) {
				synctest.Test(t, func(t *testing.T) {
					start := time.Now()
					sc.run(wt, func(ctx context.Context) {
						synctest.Wait()
						dl, ok := ctx.Deadline()
						*obs = append(*obs, observed{isDone(ctx), ctx.Err(), context.Cause(ctx), dl.Sub(start), ok})
					})
				})
			}
			record(&want, context.WithTimeout)
			record(&got, func(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
				w := New()
				ctx, cancel := w.WithTimeout(ctx, d)
				return ctx, func() { cancel(); w.Stop() }
			})
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("wheel contexts saw\n%v\nstandard ones\n%v", got, want)
			}
		})
	}
}

// TestConcurrentCancel races cancel, the deadline, the parent and readers of Done and Err; run it
// with -race. Every context must end done, with Err and Done agreeing, and the wheel empty.
func TestConcurrentCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		for i := range 200 {
			parent, pcancel := w.WithTimeout(context.Background(), time.Duration(i%3)*time.Millisecond)
			ctx, cancel := w.WithTimeout(parent, time.Duration(i%5)*time.Millisecond)
			var wg sync.WaitGroup
			wg.Go(cancel)
			wg.Go(pcancel)
			wg.Go(func() {
				if ctx.Err() != nil && !isDone(ctx) {
					t.Error("Err() non-nil while Done is open")
				}
			})
			wg.Go(func() { <-ctx.Done() })
			wg.Go(func() { _ = context.Cause(ctx) })
			wg.Wait()
			if ctx.Err() == nil || !isDone(ctx) {
				t.Fatalf("context %d not done after cancel", i)
			}
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if w.Pending() != 0 {
			t.Fatalf("Pending() = %d, want 0", w.Pending())
		}
	})
}

// TestConcurrentForeignParent races registration with a standard parent (through Done, Err and
// a standard child) against cancel, the parent's cancel and the deadline; run it with -race.
func TestConcurrentForeignParent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		errBoom := errors.New("boom")
		for i := range 200 {
			parent, pcancel := context.WithCancelCause(context.Background())
			ctx, cancel := w.WithTimeout(parent, time.Duration(i%4)*time.Millisecond)
			var wg sync.WaitGroup
			wg.Go(cancel)
			wg.Go(func() { pcancel(errBoom) })
			wg.Go(func() { <-ctx.Done() })
			wg.Go(func() {
				if ctx.Err() != nil && !isDone(ctx) {
					t.Error("Err() non-nil while Done is open")
				}
			})
			wg.Go(func() {
				child, ccancel := context.WithCancel(ctx)
				<-child.Done()
				ccancel()
			})
			wg.Wait()
			err, cause := ctx.Err(), context.Cause(ctx)
			switch {
			case err == context.Canceled && (cause == context.Canceled || cause == errBoom):
			case err == context.DeadlineExceeded && cause == context.DeadlineExceeded:
			default:
				t.Fatalf("context %d: Err() = %v, Cause() = %v", i, err, cause)
			}
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		if w.Pending() != 0 {
			t.Fatalf("Pending() = %d, want 0", w.Pending())
		}
	})
}

// TestWheelStopKeepsContextDeadline checks a wheel context made before the wheel is stopped: its
// deadline used to be dropped with the wheel's timers, so Done was never closed.
func TestWheelStopKeepsContextDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		start := time.Now()
		ctx, cancel := w.WithTimeout(context.Background(), time.Hour)
		defer cancel()
		if unfired := w.Stop(); len(unfired) != 0 {
			t.Errorf("Stop returned %d timers, want none: the context's is not the caller's", len(unfired))
		}
		time.Sleep(time.Hour - time.Millisecond)
		if err := ctx.Err(); err != nil {
			t.Fatalf("Err = %v before the deadline", err)
		}
		<-ctx.Done()
		if d := time.Since(start); d < time.Hour || d > time.Hour+2*time.Millisecond {
			t.Errorf("done after %v, want 1h (+1 tick)", d)
		}
		if err := ctx.Err(); err != context.DeadlineExceeded {
			t.Errorf("Err = %v, want DeadlineExceeded", err)
		}
	})
}

// TestCancelAfterWheelStop checks canceling a wheel context after its wheel was stopped: cancel
// used to read the wheel's refusal to stop the timer as the timer having fired, and reported
// DeadlineExceeded an hour before the deadline.
func TestCancelAfterWheelStop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		ctx, cancel := w.WithTimeout(context.Background(), time.Hour)
		child, cancelChild := w.WithTimeout(ctx, 2*time.Hour)
		defer cancelChild()
		w.Stop()
		cancel()
		if err := ctx.Err(); err != context.Canceled {
			t.Errorf("Err = %v, want Canceled", err)
		}
		if err := child.Err(); err != context.Canceled {
			t.Errorf("child Err = %v, want Canceled", err)
		}
		time.Sleep(3 * time.Hour) // the runtime timers that took over were stopped: nothing changes
		if err := ctx.Err(); err != context.Canceled {
			t.Errorf("Err = %v after the deadline, want Canceled", err)
		}
	})
}

// TestWheelStopRacingCancel cancels wheel contexts while the wheel stops: every cancel must report
// Canceled, since no deadline has passed, and every deadline must be kept by the runtime timers.
func TestWheelStopRacingCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New(WithShards(2))
		const n = 200
		ctxs := make([]context.Context, n)
		cancels := make([]context.CancelFunc, n)
		for i := range n {
			ctxs[i], cancels[i] = w.WithTimeout(context.Background(), time.Hour)
		}
		var wg sync.WaitGroup
		wg.Go(func() { w.Stop() })
		for i := 0; i < n; i += 2 {
			wg.Go(cancels[i])
		}
		wg.Wait()
		for i := 0; i < n; i += 2 {
			if err := ctxs[i].Err(); err != context.Canceled {
				t.Fatalf("canceled context %d: Err = %v, want Canceled", i, err)
			}
		}
		time.Sleep(time.Hour + time.Millisecond)
		for i := 1; i < n; i += 2 {
			if err := ctxs[i].Err(); err != context.DeadlineExceeded {
				t.Fatalf("context %d: Err = %v after its deadline, want DeadlineExceeded", i, err)
			}
		}
	})
}
