package tock

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// An outcome is what a context reports: not done (the zero outcome), or done with an error and a
// cause.
type outcome struct{ err, cause error }

var (
	notDone  = outcome{}
	canceled = outcome{context.Canceled, context.Canceled}
	expired  = outcome{context.DeadlineExceeded, context.DeadlineExceeded}
)

func canceledWith(cause error) outcome { return outcome{context.Canceled, cause} }
func expiredWith(cause error) outcome  { return outcome{context.DeadlineExceeded, cause} }

func (o outcome) String() string {
	if o == notDone {
		return "not done"
	}
	return fmt.Sprintf("done with %v (cause %v)", o.err, o.cause)
}

// isDone reports whether ctx's Done channel is closed.
func isDone(ctx context.Context) bool {
	select {
	case <-ctx.Done():
		return true
	default:
		return false
	}
}

// mustBe fails t unless ctx reports o through Done, Err and context.Cause alike.
func mustBe(t *testing.T, ctx context.Context, o outcome) {
	t.Helper()
	if done := isDone(ctx); done != (o != notDone) {
		t.Fatalf("Done closed: %v; want %v (Err %v)", done, o, ctx.Err())
	}
	if got := ctx.Err(); got != o.err {
		t.Fatalf("Err() = %v; want %v", got, o)
	}
	if got := context.Cause(ctx); got != o.cause {
		t.Fatalf("Cause() = %v; want %v", got, o)
	}
}

// parentWatchers counts the goroutines with which the context package watches parents it does not
// know.
func parentWatchers() int {
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

// childCount returns the number of children and AfterFunc registrations of a wheel context.
func childCount(ctx context.Context) int {
	c := ctx.(*deadlineCtx)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.extra == nil {
		return 0
	}
	return len(c.extra.children)
}

// A ctxFixture is one run of a row of TestContextLifecycle: a wheel, a parent, and the context
// under test, made with one of the four constructors.
type ctxFixture struct {
	w            *Wheel
	filler       int  // timers on w that are not the contexts'
	accepts      bool // w takes the contexts' timers (it is running and has room)
	start        time.Time
	parent       context.Context
	cancelParent func(cause error) // nil if the parent cannot be canceled
	wheelParent  context.Context   // the parent if it is a wheel context, perhaps beneath a value
	ctx          context.Context
	cancel       context.CancelFunc
	ownDeadline  bool // ctx's deadline is its own, not an earlier parent's: it has a timer
}

// A parentKind makes the parent of a row's context on the fixture's wheel.
type parentKind func(f *ctxFixture)

func background(f *ctxFixture) { f.parent = context.Background() }

// stdParent is a cancelable standard context, as an HTTP request's context is.
func stdParent(f *ctxFixture) {
	ctx, cancel := context.WithCancelCause(context.Background())
	f.parent, f.cancelParent = ctx, cancel
}

// stdParentDone is a standard context canceled with cause before the context is made.
func stdParentDone(cause error) parentKind {
	return func(f *ctxFixture) {
		stdParent(f)
		f.cancelParent(cause)
	}
}

// stdParentTimeout is a standard context with a timeout (and a cause, if not nil).
func stdParentTimeout(d time.Duration, cause error) parentKind {
	return func(f *ctxFixture) {
		ctx, cancel := context.WithTimeoutCause(context.Background(), d, cause)
		f.parent, f.cancelParent = ctx, func(error) { cancel() }
	}
}

// wheelParent is a wheel context with a timeout on the fixture's wheel (and a cause, if not nil).
func wheelParent(d time.Duration, cause error) parentKind {
	return func(f *ctxFixture) {
		ctx, cancel := f.w.WithTimeoutCause(context.Background(), d, cause)
		f.parent, f.wheelParent, f.cancelParent = ctx, ctx, func(error) { cancel() }
	}
}

// underValue puts parent beneath a context.WithValue wrapper.
func underValue(parent parentKind) parentKind {
	return func(f *ctxFixture) {
		parent(f)
		f.parent = context.WithValue(f.parent, key("k"), "v")
	}
}

// A customCtx is a context of a kind the context package does not know, with its own done
// channel: a child must follow it through context.AfterFunc's goroutine.
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

func customParent(f *ctxFixture) {
	c := &customCtx{Context: context.Background(), done: make(chan struct{})}
	var once sync.Once
	f.parent, f.cancelParent = c, func(error) { once.Do(func() { close(c.done) }) }
}

// A step acts on the fixture; then the test waits for the bubble to settle and checks the
// context's outcome, its deadline and the wheel's count of pending timers.
type step struct {
	do   func(f *ctxFixture)
	want outcome
}

func sleep(d time.Duration) func(*ctxFixture) { return func(*ctxFixture) { time.Sleep(d) } }
func cancel(f *ctxFixture)                    { f.cancel() }
func askDone(f *ctxFixture)                   { _ = f.ctx.Done() }
func stopWheel(f *ctxFixture)                 { f.w.Stop(); f.accepts = false }
func look(*ctxFixture)                        {}

func cancelParent(cause error) func(*ctxFixture) {
	return func(f *ctxFixture) { f.cancelParent(cause) }
}

// then runs steps one after the other, with no look at the context between them.
func then(steps ...func(*ctxFixture)) func(*ctxFixture) {
	return func(f *ctxFixture) {
		for _, s := range steps {
			s(f)
		}
	}
}

// wantPending returns the number of timers the wheel must hold: the filler, and one for each
// context of the fixture that is not done and has a deadline of its own, if the wheel took it.
func (f *ctxFixture) wantPending() int {
	n := f.filler
	if !f.accepts {
		return n
	}
	if f.wheelParent != nil && f.wheelParent.Err() == nil {
		n++
	}
	if f.ctx.Err() == nil && f.ownDeadline {
		n++
	}
	return n
}

// wheelKinds are the wheels a row runs on: running ones with each executor, and the three a
// context must fall back to a runtime timer on.
var wheelKinds = []struct {
	name string
	make func(f *ctxFixture)
}{
	{"pool", func(f *ctxFixture) { f.w, f.accepts = New(WithPoolExecutor(2)), true }},
	{"inline", func(f *ctxFixture) { f.w, f.accepts = New(WithInlineExecutor()), true }},
	{"goroutine", func(f *ctxFixture) { f.w, f.accepts = New(WithGoroutineExecutor()), true }},
	{"full", func(f *ctxFixture) {
		f.w, f.filler = New(WithMaxPending(1)), 1
		if _, err := f.w.AfterFunc(math.MaxInt64, func() {}); err != nil {
			panic(err)
		}
	}},
	{"stopped", func(f *ctxFixture) { f.w = New(); f.w.Stop() }},
	{"nil", func(f *ctxFixture) {}},
}

// constructors are the four ways to make a wheel context, given a timeout from the fixture's
// start and a cause (nil for the forms without one).
var constructors = []struct {
	name string
	make func(f *ctxFixture, timeout time.Duration, cause error) (context.Context, context.CancelFunc)
}{
	{"WithTimeout", func(f *ctxFixture, d time.Duration, cause error) (context.Context, context.CancelFunc) {
		if cause != nil {
			return f.w.WithTimeoutCause(f.parent, d, cause)
		}
		return f.w.WithTimeout(f.parent, d)
	}},
	{"WithDeadline", func(f *ctxFixture, d time.Duration, cause error) (context.Context, context.CancelFunc) {
		if cause != nil {
			return f.w.WithDeadlineCause(f.parent, f.start.Add(d), cause)
		}
		return f.w.WithDeadline(f.parent, f.start.Add(d))
	}},
}

// TestContextLifecycle is the specification of a wheel context's life: how each parent, each
// event and the wheel's own state end it. Each row runs on every kind of wheel (skipping those
// that cannot run it) with WithTimeout and WithDeadline. After every step it checks the outcome,
// and that the wheel holds a timer exactly for each live context with a deadline of its own; at
// the start, that Deadline reports the context's deadline, or its parent's if that is earlier.
func TestContextLifecycle(t *testing.T) {
	errBoom := errors.New("boom")
	errSlow := errors.New("slow")
	tests := []struct {
		name    string
		parent  parentKind // background if nil
		timeout time.Duration
		cause   error // made with WithTimeoutCause or WithDeadlineCause if set
		running bool  // the row stops the wheel, so it runs only on running wheels
		steps   []step
	}{
		// Its own deadline and cancel.
		{name: "expires at its deadline, never early, at most a tick late", timeout: 100 * time.Millisecond, steps: []step{
			{sleep(100*time.Millisecond - time.Nanosecond), notDone},
			{sleep(time.Nanosecond + DefaultTick), expired},
			{cancel, expired},
		}},
		{name: "cancel closes a Done channel made before it and stops the timer", timeout: time.Hour, steps: []step{
			{askDone, notDone},
			{cancel, canceled},
			{cancel, canceled},
			{sleep(2 * time.Hour), canceled},
		}},
		{name: "cancel after the deadline passed, before anyone looked", timeout: time.Millisecond, steps: []step{
			{then(sleep(10*time.Millisecond), cancel), expired},
		}},
		{name: "zero timeout is done at once", timeout: 0, steps: []step{{look, expired}, {cancel, expired}}},
		{name: "deadline a nanosecond ago is done at once", timeout: -time.Nanosecond, steps: []step{{look, expired}, {cancel, expired}}},
		{name: "deadline an hour ago is done at once", timeout: -time.Hour, steps: []step{{look, expired}, {cancel, expired}}},
		{name: "the largest timeout never expires", timeout: math.MaxInt64, steps: []step{
			{sleep(100 * 365 * 24 * time.Hour), notDone},
			{cancel, canceled},
		}},

		// A cause of its own.
		{name: "expires with its cause", timeout: time.Second, cause: errSlow, steps: []step{
			{sleep(time.Second), expiredWith(errSlow)},
			{cancel, expiredWith(errSlow)},
		}},
		{name: "cancel does not set the cause", timeout: time.Second, cause: errSlow, steps: []step{
			{cancel, canceled},
			{sleep(time.Second), canceled},
		}},
		{name: "a past deadline has its cause", timeout: -time.Second, cause: errSlow, steps: []step{
			{look, expiredWith(errSlow)},
		}},

		// A standard parent.
		{name: "std parent canceled", parent: stdParent, timeout: time.Hour, steps: []step{
			{cancelParent(nil), canceled},
		}},
		{name: "std parent canceled with a cause", parent: stdParent, timeout: time.Hour, steps: []step{
			{look, notDone},
			{cancelParent(errBoom), canceledWith(errBoom)},
		}},
		{name: "std parent canceled while registered", parent: stdParent, timeout: time.Hour, steps: []step{
			{askDone, notDone},
			{cancelParent(errBoom), canceledWith(errBoom)},
		}},
		{name: "cancel just after the std parent was canceled reports the parent's", parent: stdParent, timeout: time.Hour, steps: []step{
			{then(cancelParent(errBoom), cancel), canceledWith(errBoom)},
		}},
		{name: "expires under a live std parent, which cannot change it later", parent: stdParent, timeout: time.Second, steps: []step{
			{sleep(2 * time.Second), expired},
			{cancelParent(errBoom), expired},
		}},
		{name: "std parent canceled before", parent: stdParentDone(errBoom), timeout: time.Hour, steps: []step{
			{look, canceledWith(errBoom)},
			{cancel, canceledWith(errBoom)},
		}},
		{name: "std parent expired before", parent: stdParentTimeout(-1, nil), timeout: time.Hour, steps: []step{
			{look, expired},
		}},
		{name: "std parent's earlier deadline rules", parent: stdParentTimeout(time.Second, errBoom), timeout: time.Hour, steps: []step{
			{look, notDone},
			{sleep(time.Second), expiredWith(errBoom)},
		}},
		{name: "cancel under a std parent with an earlier deadline", parent: stdParentTimeout(time.Second, nil), timeout: time.Hour, steps: []step{
			{cancel, canceled},
			{sleep(time.Second), canceled},
		}},

		// A custom parent.
		{name: "custom parent done, with no one waiting", parent: customParent, timeout: time.Minute, steps: []step{
			{cancelParent(nil), canceled},
		}},
		{name: "custom parent done while registered", parent: customParent, timeout: time.Minute, steps: []step{
			{askDone, notDone},
			{cancelParent(nil), canceled},
		}},

		// A wheel parent.
		{name: "wheel parent canceled", parent: wheelParent(time.Hour, nil), timeout: time.Minute, steps: []step{
			{cancelParent(nil), canceled},
		}},
		{name: "wheel parent beneath a value canceled", parent: underValue(wheelParent(time.Hour, nil)), timeout: time.Minute, steps: []step{
			{cancelParent(nil), canceled},
		}},
		{name: "wheel parent expires with its cause", parent: wheelParent(time.Second, errSlow), timeout: time.Minute, steps: []step{
			{sleep(time.Second), expiredWith(errSlow)},
			{cancel, expiredWith(errSlow)},
		}},
		{name: "wheel parent's earlier deadline rules", parent: wheelParent(time.Hour, nil), timeout: 2 * time.Hour, steps: []step{
			{sleep(time.Hour), expired},
		}},
		{name: "wheel parent done before", parent: wheelParent(-1, errSlow), timeout: time.Minute, steps: []step{
			{look, expiredWith(errSlow)},
		}},
		{name: "expires under a live wheel parent", parent: wheelParent(time.Hour, nil), timeout: time.Minute, steps: []step{
			{sleep(time.Minute), expired},
			{cancelParent(nil), expired},
		}},

		// The wheel stops.
		{name: "wheel stopped: the deadline holds", timeout: time.Hour, running: true, steps: []step{
			{stopWheel, notDone},
			{sleep(time.Hour - time.Nanosecond), notDone},
			{sleep(time.Nanosecond + DefaultTick), expired},
		}},
		{name: "wheel stopped, then canceled", timeout: time.Hour, running: true, steps: []step{
			{stopWheel, notDone},
			{cancel, canceled},
			{sleep(3 * time.Hour), canceled},
		}},
		{name: "wheel stopped, then wheel parent canceled", parent: wheelParent(time.Hour, nil), timeout: 2 * time.Hour, running: true, steps: []step{
			{stopWheel, notDone},
			{cancelParent(nil), canceled},
			{sleep(3 * time.Hour), canceled},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, wk := range wheelKinds {
				if tt.running && !strings.Contains("pool inline goroutine", wk.name) {
					continue
				}
				for _, ctor := range constructors {
					t.Run(wk.name+"/"+ctor.name, func(t *testing.T) {
						synctest.Test(t, func(t *testing.T) {
							f := &ctxFixture{}
							wk.make(f)
							if f.w != nil {
								defer f.w.Stop()
							}
							f.start = time.Now()
							parent := tt.parent
							if parent == nil {
								parent = background
							}
							parent(f)
							if f.cancelParent != nil {
								defer f.cancelParent(nil)
							}
							f.ctx, f.cancel = ctor.make(f, tt.timeout, tt.cause)
							defer f.cancel()

							want := f.start.Add(tt.timeout)
							f.ownDeadline = true
							if pdl, ok := f.parent.Deadline(); ok && pdl.Before(want) {
								want, f.ownDeadline = pdl, false
							}
							if dl, ok := f.ctx.Deadline(); !ok || !dl.Equal(want) {
								t.Fatalf("Deadline() = %v, %v; want %v, true", dl, ok, want)
							}
							for i, s := range tt.steps {
								s.do(f)
								synctest.Wait()
								mustBe(t, f.ctx, s.want)
								if f.w != nil {
									if got, want := f.w.Pending(), f.wantPending(); got != want {
										t.Fatalf("after step %d: wheel Pending() = %d, want %d", i, got, want)
									}
								}
							}
						})
					})
				}
			}
		})
	}
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

func TestWheelParentCancelsChildrenSynchronously(t *testing.T) {
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
		if n := childCount(parent); n != 3 {
			t.Fatalf("parent has %d children, want 3: wheel parents link children directly", n)
		}
		if w.Pending() != 3 {
			t.Fatalf("Pending() = %d, want 3", w.Pending())
		}
		pcancel()
		for _, c := range []context.Context{parent, child, child2, child3} {
			mustBe(t, c, canceled) // synchronously, no goroutine
		}
		if w.Pending() != 0 {
			t.Fatalf("Pending() = %d, want 0", w.Pending())
		}
	})
}

func TestWheelParentExpiryReachesDescendants(t *testing.T) {
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
		mustBe(t, parent, expiredWith(errSlow))
		mustBe(t, child, expiredWith(errSlow))
		mustBe(t, std, expiredWith(errSlow))

		// A child made after its wheel parent is done is done at once.
		late, lcancel := w.WithTimeout(parent, time.Minute)
		defer lcancel()
		mustBe(t, late, expiredWith(errSlow))
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
		if n := childCount(parent); n != 0 {
			t.Fatalf("parent keeps %d children after they were canceled or expired, want 0", n)
		}
		mustBe(t, parent, notDone)
	})
}

func TestStdChildRegistersThroughAfterFunc(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		ctx, cancel := w.WithTimeout(context.Background(), time.Hour)
		std, scancel := context.WithCancel(ctx)
		defer scancel()
		if n := childCount(ctx); n != 1 {
			t.Fatalf("wheel context has %d registrations, want 1: context.WithCancel must use its AfterFunc method", n)
		}
		scancel()
		if n := childCount(ctx); n != 0 {
			t.Fatalf("wheel context keeps %d registrations after the child was canceled, want 0", n)
		}
		std, scancel = context.WithCancel(ctx)
		defer scancel()
		cancel()
		mustBe(t, std, canceled)
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

func TestCustomParentIsNotBypassed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := New()
		defer w.Stop()
		// A custom context wrapping a wheel context must not be bypassed.
		inner, icancel := w.WithTimeout(context.Background(), time.Hour)
		defer icancel()
		parent := &customCtx{Context: inner, done: make(chan struct{})}
		ctx, cancel := w.WithTimeout(parent, time.Minute)
		defer cancel()
		if n := childCount(inner); n != 0 {
			t.Fatalf("child linked to a wheel context behind a custom one (%d children)", n)
		}
		close(parent.done)
		synctest.Wait()
		mustBe(t, ctx, canceled)
		mustBe(t, inner, notDone)

		// Canceling the child ends the goroutine that watched the parent.
		parent = &customCtx{Context: context.Background(), done: make(chan struct{})}
		ctx, cancel = w.WithTimeout(parent, time.Minute)
		_ = ctx.Done()
		cancel()
		synctest.Wait()
		if n := parentWatchers(); n != 0 {
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
		if n := parentWatchers(); n != 0 {
			t.Fatalf("%d goroutines watch the parent after WithTimeout, want 0: no registration yet", n)
		}
		mustBe(t, ctx, notDone)
		_ = ctx.Done()
		synctest.Wait()
		if n := parentWatchers(); n != 1 {
			t.Fatalf("%d goroutines watch the parent after Done, want 1: registered", n)
		}
		cancel()
		synctest.Wait()
		if n := parentWatchers(); n != 0 {
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
		mustBe(t, ctx, canceled)
		if w.Pending() != 0 {
			t.Fatalf("Pending() = %d, want 0: adopting the parent's end stops the timer", w.Pending())
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
