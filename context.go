package tock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// WithTimeout returns [Wheel.WithDeadline](parent, time.Now().Add(timeout)), but reads the clock
// more cheaply: the deadline is the wheel's creation time plus the monotonic time since then plus
// timeout. Its monotonic reading, which [time.Until], Sub, Before and the net package use, is
// exact; its wall-clock reading (what String, Unix and Format show) differs from
// time.Now().Add(timeout) by however much the wall clock has been set or has drifted since New.
//
// Canceling the returned context releases the resources associated with it, so code should call
// cancel as soon as the operations running in it complete:
//
//	ctx, cancel := w.WithTimeout(r.Context(), 2*time.Second)
//	defer cancel()
func (w *Wheel) WithTimeout(parent context.Context, timeout time.Duration) (context.Context, context.CancelFunc) {
	d, at := w.deadlineAfter(timeout)
	return w.withDeadline(parent, d, timeout, at, nil)
}

// WithTimeoutCause behaves like [Wheel.WithTimeout] but also sets the cause of the returned context
// when the timeout expires: [context.Cause] then returns cause. The returned CancelFunc does not
// set the cause.
func (w *Wheel) WithTimeoutCause(parent context.Context, timeout time.Duration, cause error) (context.Context, context.CancelFunc) {
	d, at := w.deadlineAfter(timeout)
	return w.withDeadline(parent, d, timeout, at, cause)
}

// deadlineAfter returns the deadline timeout from now and its distance from the wheel's epoch in
// nanoseconds. It reads only the monotonic clock, which costs half what time.Now does, the largest
// single cost of a wheel context.
func (w *Wheel) deadlineAfter(timeout time.Duration) (time.Time, int64) {
	if w == nil {
		return time.Now().Add(timeout), 0
	}
	at := addClamped(w.now(), timeout)
	return w.epoch.Add(time.Duration(at)), at
}

// WithDeadline returns a derived context that points to parent and is done when the deadline d
// passes, when the returned cancel function is called, or when parent is done, whichever happens
// first. It is [context.WithDeadline] with the timer kept on the wheel instead of the runtime's
// timer heap, which makes it cheaper to create and cancel: for servers that put a deadline on every
// request, most of which finish in time.
//
// The returned [context.Context] behaves as context.WithDeadline's does: Deadline reports d, or
// parent's deadline if that is earlier (the context then has no timer of its own, as
// [context.WithCancel]'s); Err returns [context.DeadlineExceeded] after the deadline and
// [context.Canceled] after cancel; when parent is done first, Err returns what parent's Err returns
// (mapped to one of those two) and context.Cause returns parent's cause; values are those of
// parent. Contexts derived from it with the context package, and other wheel contexts, are canceled
// with it without a goroutine each. Under a parent of another kind, such as a standard context, the
// context joins the parent (with [context.AfterFunc]) only when its Done channel or a derived
// context needs that; until then Err and cancel consult the parent.
//
// The deadline is honoured as the wheel honours a timer: Done is closed no earlier than d and
// normally within a tick after it (see [WithTick]). If the wheel has been stopped, is full (see
// [WithMaxPending]) or w is nil, the context falls back to a runtime timer, and one takes over the
// timer when the wheel is stopped later, so the deadline always holds.
//
// The returned CancelFunc may be called any number of times, from any goroutine; calls after the
// first do nothing. WithDeadline panics if parent is nil, as [context.WithDeadline] does.
func (w *Wheel) WithDeadline(parent context.Context, d time.Time) (context.Context, context.CancelFunc) {
	dur, at := w.until(d)
	return w.withDeadline(parent, d, dur, at, nil)
}

// WithDeadlineCause behaves like [Wheel.WithDeadline] but also sets the cause of the returned
// context when the deadline is exceeded: [context.Cause] then returns cause. The returned
// CancelFunc does not set the cause.
func (w *Wheel) WithDeadlineCause(parent context.Context, d time.Time, cause error) (context.Context, context.CancelFunc) {
	dur, at := w.until(d)
	return w.withDeadline(parent, d, dur, at, cause)
}

// until returns the time from now until d, as time.Until does, and d's distance from the wheel's
// epoch in nanoseconds.
func (w *Wheel) until(d time.Time) (time.Duration, int64) {
	now := time.Now()
	dur := d.Sub(now)
	if w == nil {
		return dur, 0
	}
	return dur, addClamped(int64(now.Sub(w.epoch)), dur)
}

// A deadlineCtx is the context of WithDeadline. Creating one costs one allocation of the struct
// plus one for its fire method value, which serves as the wheel callback and as the CancelFunc:
// fire tells the roles apart (see fire). Everything that only some contexts need (children, a
// custom cause, a fallback timer) lives in extra, made on first need.
//
// The state word decides every race. Its error bits go from zero to non-zero once, by a
// compare-and-swap in cancel; flags are set once and never cleared. A context without extra is
// canceled without taking mu: Done, which makes the done channel under mu, publishes it with a
// compare-and-swap too, so exactly one of them sees the other (cancel closes the channel, or Done
// hands out the closed closedchan). Whoever makes extra sets flagExtra under mu and looks at the
// error bits it got back, which sends every later cancel through mu. Fields documented as published
// by a flag are written before the flag is set, so whoever observes the flag may read them without
// mu.
type deadlineCtx struct {
	parent   context.Context
	deadline time.Time
	timer    Timer         // the wheel timer; published by flagArmed
	done     chan struct{} // written under mu; published by flagDoneMade
	extra    *ctxExtra     // written under mu; published by flagExtra; never replaced once made

	// stopParent ends the context.AfterFunc registration with a foreign parent (see register).
	// Guarded by mu. It lives here rather than in extra because the struct has room for it in its
	// size class, and a request context under http.Request.Context is the common case.
	stopParent func() bool
	mu         sync.Mutex
	state      atomic.Uint32
}

// ctxExtra holds what only some deadline contexts need. Its fields are guarded by the owner's mu,
// except rtimer, which is published by flagArmed.
type ctxExtra struct {
	children      map[canceler]struct{} // wheel contexts and AfterFunc registrations to cancel with this one; nil once done
	rtimer        *time.Timer           // the fallback timer when the wheel refused ours
	deadlineCause error                 // from WithDeadlineCause: the cause when the deadline is exceeded
	cause         error                 // why the context was canceled, when that is not just Err()
	carrier       context.Context       // a canceled standard context holding cause, for context.Cause
}

// The bits of deadlineCtx.state.
const (
	errCanceled = 1 // Err is context.Canceled
	errDeadline = 2 // Err is context.DeadlineExceeded
	errMask     = 3

	flagDoneMade      = 1 << 2 // done is set
	flagExtra         = 1 << 3 // extra is set: cancel must take mu
	flagArmed         = 1 << 4 // the timer (or extra.rtimer) is set: fire must stop it to tell a cancel from the deadline
	flagNoTimer       = 1 << 5 // the context never has a timer: every call of fire is a cancel
	flagRuntimeTimer  = 1 << 6 // the timer is extra.rtimer, a runtime timer, not a wheel timer
	flagWheelChild    = 1 << 7 // registered in the children of a wheel-context ancestor
	flagForeignParent = 1 << 8 // parent is of another kind and may be done: see register
	flagRegistered    = 1 << 9 // registered with context.AfterFunc(parent, fire); stopParent ends it
)

// A canceler is something a deadlineCtx cancels or calls when it is done: a child wheel context or
// an AfterFunc registration.
type canceler interface {
	parentDone(e uint32, cause error)
}

// deadlineCtxKey is the key for which a deadlineCtx returns itself from Value, so a child can find
// a wheel-context ancestor beneath context.WithValue wrappers.
var deadlineCtxKey int

// cancelCtxKey is the key with which context.Cause asks a context for the innermost standard
// cancelable context, to read the cause from it. A deadlineCtx answers it itself instead of passing
// it on to its parent: otherwise context.Cause would report the state of some standard ancestor
// rather than of the wheel context. The context package does not export the key, so it is learnt
// once by watching context.Cause ask a probe for it. If that ever stops working, it is nil, and
// context.Cause of a wheel context falls back to what the context package makes of an unknown
// context.
var cancelCtxKey = findCancelCtxKey()

// closedchan is the done channel of contexts that are done before anyone asks for the channel.
var closedchan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

type keyProbe struct {
	context.Context
	key any
}

func (p *keyProbe) Value(key any) any {
	if p.key == nil {
		p.key = key
	}
	return nil
}

func findCancelCtxKey() any {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	p := &keyProbe{Context: ctx}
	_ = context.Cause(p)
	if p.key == nil {
		return nil
	}
	// A canceled standard context returns itself for the key.
	if _, ok := ctx.Value(p.key).(context.Context); !ok {
		return nil
	}
	return p.key
}

// withDeadline makes the context for deadline d, which is dur from now and at nanoseconds after
// the wheel's epoch.
func (w *Wheel) withDeadline(parent context.Context, d time.Time, dur time.Duration, at int64, cause error) (context.Context, context.CancelFunc) {
	if parent == nil {
		panic("tock: cannot create context from nil parent")
	}
	c := &deadlineCtx{parent: parent, deadline: d}
	f := c.fire
	if cur, ok := parent.Deadline(); ok && cur.Before(d) {
		// The parent's deadline comes first: that is the deadline, and parent enforces it.
		c.deadline = cur
		c.state.Store(flagNoTimer)
		c.propagate(parent)
		return c, f
	}
	if cause != nil {
		c.extra = &ctxExtra{deadlineCause: cause}
		c.state.Store(flagExtra)
	}
	if c.propagate(parent) {
		return c, f // parent was already done, and so is c
	}
	if dur <= 0 {
		c.state.Or(flagNoTimer)
		c.cancel(errDeadline, nil, true)
		return c, f
	}
	if t, err := w.afterFuncAt(at, f); err == nil {
		c.timer = t
		c.state.Or(flagArmed)
	} else {
		// The wheel cannot take the timer; a runtime timer keeps the deadline. fire may run before
		// flagArmed is set, which it reads as the timer firing: right, since no one else has f.
		rt := time.AfterFunc(dur, f)
		c.mu.Lock()
		c.extraLocked().rtimer = rt
		c.mu.Unlock()
		c.state.Or(flagArmed | flagRuntimeTimer)
	}
	if c.state.Load()&errMask != 0 {
		// parent canceled c while the timer was being armed. If cancel came before flagArmed it
		// did not stop the timer; if after, it did, and stopping again does no harm.
		c.stopTimer()
	}
	return c, f
}

// afterFuncAt schedules f on w to run at nanoseconds after the wheel's epoch: AfterFunc without its
// own reading of the clock, since the caller has just read it. The timer outlives the wheel (see
// handoff.go), so that the context's deadline holds whatever becomes of the wheel. It reports
// ErrStopped if w is nil.
func (w *Wheel) afterFuncAt(at int64, f func()) (Timer, error) {
	if w == nil {
		return Timer{}, ErrStopped
	}
	return w.scheduleHandOff(w.tickAt(at), f)
}

// fire is the timer's callback, the CancelFunc, and the function context.AfterFunc calls when a
// parent of another kind is done. If such a parent is done, fire cancels c with the parent's error
// whoever called, as the context package would have done already for a child of its own.
// Otherwise, before the constructor returns only the timer can call it; after that, a call is a
// cancel if it stops the timer, and otherwise the timer has fired (the wheel promises that exactly
// one of "Stop returned true" and "the callback ran" happens), so the deadline has passed and
// DeadlineExceeded is the right error whoever called.
func (c *deadlineCtx) fire() {
	s := c.state.Load()
	if s&errMask != 0 {
		return
	}
	if s&flagForeignParent != 0 && c.parentErr() {
		return
	}
	e := uint32(errDeadline)
	switch {
	case s&flagNoTimer != 0:
		e = errCanceled
	case s&flagArmed == 0:
		// The timer fired before the constructor returned.
	case s&flagRuntimeTimer != 0:
		if c.extra.rtimer.Stop() {
			e = errCanceled
		}
	default:
		if c.timer.Stop() {
			e = errCanceled
		}
	}
	c.cancel(e, nil, true)
}

// parentDone cancels c because a wheel-context ancestor was done with error bits e and cause.
func (c *deadlineCtx) parentDone(e uint32, cause error) {
	c.cancel(e, cause, false)
}

// parentErr cancels c with parent's error and cause if parent is done.
func (c *deadlineCtx) parentErr() bool {
	err := c.parent.Err()
	if err == nil {
		return false
	}
	c.cancel(errBits(err), context.Cause(c.parent), false)
	return true
}

// cancel makes c done with the error bits e and cause (nil meaning the error itself), unless it is
// done already. self is true when c cancels itself (its cancel function, its timer, or a deadline
// in the past): c then leaves its parent, and its timer needs no stopping because fire decided
// that. Otherwise its parent is canceling it: the timer is stopped, and the parent has already
// dropped c.
//
// A context with extra, or a cause to keep, is canceled under mu; others without it. Children are
// canceled after mu is released, so no lock is held while taking another, and lock order never
// matters.
func (c *deadlineCtx) cancel(e uint32, cause error, self bool) {
	if cause == errOf(e) {
		cause = nil
	}
	var s uint32
	for {
		s = c.state.Load()
		if s&errMask != 0 {
			return
		}
		if s&flagExtra != 0 || cause != nil {
			c.cancelLocked(e, cause, self)
			return
		}
		if c.state.CompareAndSwap(s, s|e) {
			break
		}
	}
	if s&flagDoneMade != 0 {
		close(c.done)
	}
	c.detach(s, self)
}

func (c *deadlineCtx) cancelLocked(e uint32, cause error, self bool) {
	c.mu.Lock()
	ex := c.extraLocked() // before the error bits, so causeValue finds extra once it sees them
	var s uint32
	for {
		s = c.state.Load()
		if s&errMask != 0 {
			c.mu.Unlock()
			return
		}
		if c.state.CompareAndSwap(s, s|e) {
			break
		}
	}
	if self && e == errDeadline && ex.deadlineCause != nil {
		cause = ex.deadlineCause
	}
	ex.cause = cause
	if s&flagDoneMade != 0 {
		close(c.done)
	}
	children := ex.children
	ex.children = nil
	c.mu.Unlock()

	for k := range children {
		k.parentDone(e, cause)
	}
	c.detach(s, self)
}

// detach ends what ties c, now canceled, to the world, given the state s it was canceled from: its
// place in its parent when it canceled itself, its timer when its parent canceled it.
func (c *deadlineCtx) detach(s uint32, self bool) {
	if !self {
		if s&flagArmed != 0 {
			c.stopTimer()
		}
		return
	}
	if s&flagWheelChild != 0 {
		if p := c.wheelParent(); p != nil {
			p.removeChild(c)
		}
	}
	if c.state.Load()&flagRegistered != 0 {
		// Registration may be under way; then it finds c done and stops itself.
		c.mu.Lock()
		stop := c.stopParent
		c.mu.Unlock()
		if stop != nil {
			stop()
		}
	}
}

// stopTimer stops c's timer, which must be armed.
func (c *deadlineCtx) stopTimer() {
	if c.state.Load()&flagRuntimeTimer != 0 {
		c.extra.rtimer.Stop()
		return
	}
	c.timer.Stop()
}

// propagate arranges for c to be canceled when parent is done, and reports whether parent is done
// already (c is then canceled). It uses the cheapest means parent allows: nothing for a parent that
// is never done, a place among the children of a wheel-context parent, and for any other parent,
// a foreign one, nothing yet (see register).
func (c *deadlineCtx) propagate(parent context.Context) bool {
	if p, ok := parent.(*deadlineCtx); ok {
		return c.joinParent(p)
	}
	done := parent.Done()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return c.parentErr()
	default:
	}
	// A wheel context beneath value wrappers; its done channel must be parent's, or some other
	// context in between has its own idea of when parent is done.
	if p, ok := parent.Value(&deadlineCtxKey).(*deadlineCtx); ok && p.Done() == done {
		return c.joinParent(p)
	}
	c.state.Or(flagForeignParent)
	return false
}

// register makes sure that a foreign parent's end reaches c, once something needs it to: the done
// channel, a child, or an AfterFunc registration. Until then c answers for parent by asking it:
// fire and Err look at parent.Err first and adopt its error. So a context under, say, an HTTP
// request's context that is canceled without anyone waiting on Done costs no registration.
//
// If parent is done, register cancels c at once, as the context package would have done already
// for a child of its own. Otherwise it registers fire with context.AfterFunc, which puts it among
// the children of a standard parent (and starts a goroutine for a parent it does not know). One
// caller registers; a concurrent one may return before that is complete, which only delays a
// cancel that was racing with it anyway.
func (c *deadlineCtx) register() {
	for {
		s := c.state.Load()
		if s&flagForeignParent == 0 || s&(flagRegistered|errMask) != 0 {
			return
		}
		if c.parentErr() {
			return
		}
		if c.state.CompareAndSwap(s, s|flagRegistered) {
			break
		}
	}
	stop := context.AfterFunc(c.parent, c.fire)
	c.mu.Lock()
	c.stopParent = stop
	done := c.state.Load()&errMask != 0
	c.mu.Unlock()
	if done {
		stop() // c was canceled meanwhile, and its cancel found no stopParent
	}
}

// joinParent adds c to the children of p, or cancels c if p is done already, which it reports.
func (c *deadlineCtx) joinParent(p *deadlineCtx) bool {
	if e, cause := p.addChild(c); e != 0 {
		c.cancel(e, cause, false)
		return true
	}
	c.state.Or(flagWheelChild)
	return false
}

// addChild adds k to the children of c unless c is done, in which case it returns c's error bits
// and cause.
func (c *deadlineCtx) addChild(k canceler) (e uint32, cause error) {
	c.register()
	c.mu.Lock()
	defer c.mu.Unlock()
	ex := c.extraLocked()
	if s := c.state.Load(); s&errMask != 0 {
		return s & errMask, ex.cause
	}
	if ex.children == nil {
		ex.children = make(map[canceler]struct{})
	}
	ex.children[k] = struct{}{}
	return 0, nil
}

// wheelParent returns the wheel context whose children c joined.
func (c *deadlineCtx) wheelParent() *deadlineCtx {
	if p, ok := c.parent.(*deadlineCtx); ok {
		return p
	}
	p, _ := c.parent.Value(&deadlineCtxKey).(*deadlineCtx)
	return p
}

func (c *deadlineCtx) removeChild(k canceler) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.extra == nil {
		return false
	}
	if _, ok := c.extra.children[k]; !ok {
		return false
	}
	delete(c.extra.children, k)
	return true
}

// extraLocked returns c.extra, making it first if need be.
// Once it returns, every cancel of c takes mu, so a caller that finds c not done (under mu, after
// the call) may change extra knowing that cancel will see the change.
func (c *deadlineCtx) extraLocked() *ctxExtra {
	if c.extra == nil {
		c.extra = new(ctxExtra)
		c.state.Or(flagExtra)
	}
	return c.extra
}

// Deadline returns the context's deadline: the one it was created with, or its parent's if that
// is earlier.
func (c *deadlineCtx) Deadline() (time.Time, bool) {
	return c.deadline, true
}

// Done returns a channel that is closed when the context is done. It is made on the first call.
func (c *deadlineCtx) Done() <-chan struct{} {
	if c.state.Load()&flagDoneMade != 0 {
		return c.done
	}
	c.register()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.state.Load()&flagDoneMade == 0 {
		ch := make(chan struct{})
		for {
			s := c.state.Load()
			if s&errMask != 0 {
				c.done = closedchan
			} else {
				c.done = ch
			}
			if c.state.CompareAndSwap(s, s|flagDoneMade) {
				break
			}
		}
	}
	return c.done
}

// Err returns nil while the context is not done, then context.DeadlineExceeded or
// context.Canceled. Once it returns an error, the Done channel is closed.
func (c *deadlineCtx) Err() error {
	s := c.state.Load()
	if s&errMask == 0 {
		if s&flagForeignParent == 0 || !c.parentErr() {
			return nil
		}
		s = c.state.Load()
	}
	if s&flagDoneMade != 0 {
		<-c.done // cancel may be between setting the error and closing done
	}
	return errOf(s & errMask)
}

// Value returns parent's value for key. It answers for two keys itself: deadlineCtxKey, for which
// it returns c, and the context package's key for context.Cause (see cancelCtxKey).
func (c *deadlineCtx) Value(key any) any {
	if key == &deadlineCtxKey {
		return c
	}
	if cancelCtxKey != nil && key == cancelCtxKey {
		return c.causeValue(key)
	}
	return c.parent.Value(key)
}

// causeValue answers context.Cause's question: a canceled standard context holding the cause if c
// was canceled with a cause other than its error, else nil, so context.Cause returns c.Err().
func (c *deadlineCtx) causeValue(key any) any {
	if s := c.state.Load(); s&errMask == 0 || s&flagExtra == 0 {
		return nil // not done, or done without a cause of its own (a cause needs extra, made first)
	}
	c.mu.Lock()
	ex := c.extra
	if ex.cause == nil {
		c.mu.Unlock()
		return nil
	}
	if ex.carrier == nil {
		carrier, cancel := context.WithCancelCause(context.Background())
		cancel(ex.cause)
		ex.carrier = carrier
	}
	carrier := ex.carrier
	c.mu.Unlock()
	return carrier.Value(key)
}

// AfterFunc arranges to call f once c is done, and returns a function that stops the arrangement,
// reporting true if it stopped f from being called. The context package uses this method (it looks
// for it) to cancel contexts derived from c and run context.AfterFunc functions without a goroutine
// each.
//
// If c is done already, f is called at once in its own goroutine. Otherwise f is called in the
// goroutine that makes c done (the wheel's executor, when the deadline passes), after c's lock is
// released, so f must be quick; what the context package passes is.
func (c *deadlineCtx) AfterFunc(f func()) (stop func() bool) {
	a := &afterFunc{f: f}
	if e, _ := c.addChild(a); e != 0 {
		go f()
		return func() bool { return false }
	}
	return func() bool { return c.removeChild(a) }
}

type afterFunc struct{ f func() }

func (a *afterFunc) parentDone(uint32, error) { a.f() }

// String describes the context as the context package describes its own.
func (c *deadlineCtx) String() string {
	return contextName(c.parent) + ".WithDeadline(" + c.deadline.String() +
		" [" + time.Until(c.deadline).String() + "])"
}

func contextName(c context.Context) string {
	if s, ok := c.(fmt.Stringer); ok {
		return s.String()
	}
	return fmt.Sprintf("%T", c)
}

// errOf returns the error that the error bits e stand for.
func errOf(e uint32) error {
	switch e {
	case errCanceled:
		return context.Canceled
	case errDeadline:
		return context.DeadlineExceeded
	}
	return nil
}

// errBits returns the error bits for a parent's error: DeadlineExceeded (or an error that is one)
// stays that, anything else is a cancellation.
func errBits(err error) uint32 {
	if errors.Is(err, context.DeadlineExceeded) {
		return errDeadline
	}
	return errCanceled
}
