package timerbench

import (
	"time"

	"github.com/tockwheel/tock"
)

// Tock is a Scheduler on a tock wheel.
type Tock struct{ W *tock.Wheel }

// NewTock returns a Scheduler on a new wheel with the default options. Its type is what Burst and
// Memory take to make a facility per run.
func NewTock() Scheduler[tock.Timer] { return Tock{tock.New()} }

// AfterFunc schedules f on the wheel and panics on an error, which the scenarios never provoke.
func (s Tock) AfterFunc(d time.Duration, f func()) tock.Timer {
	t, err := s.W.AfterFunc(d, f)
	if err != nil {
		panic(err) // the scenarios schedule within the wheel's bounds; an error is a bug
	}
	return t
}

// Stop stops t.
func (s Tock) Stop(t tock.Timer) bool { return t.Stop() }

// Reset resets t.
func (s Tock) Reset(t tock.Timer, d time.Duration) bool { return t.Reset(d) }

// Close stops the wheel.
func (s Tock) Close() { s.W.Stop() }

// Runtime is a Scheduler on the Go runtime's timers: time.AfterFunc.
type Runtime struct{}

// NewRuntime returns the runtime's timers as a Scheduler.
func NewRuntime() Scheduler[*time.Timer] { return Runtime{} }

func (Runtime) AfterFunc(d time.Duration, f func()) *time.Timer { return time.AfterFunc(d, f) }
func (Runtime) Stop(t *time.Timer) bool                         { return t.Stop() }
func (Runtime) Reset(t *time.Timer, d time.Duration) bool       { return t.Reset(d) }

// Close does nothing: runtime timers belong to no facility, so the scenarios stop theirs.
func (Runtime) Close() {}
