package tock

import "errors"

// Errors returned by the wheel. Compare with [errors.Is].
var (
	// ErrStopped is returned by [Wheel.AfterFunc], [Wheel.AtFunc], [Wheel.Every] and
	// [Wheel.EveryDelay] when the wheel has been stopped ([Wheel.Stop]).
	ErrStopped = errors.New("tock: wheel stopped")

	// ErrTooManyPending is returned when scheduling would take the wheel past the bound set with
	// [WithMaxPending]. Nothing is scheduled; the caller may retry after timers fire or are stopped.
	ErrTooManyPending = errors.New("tock: too many pending timers")

	// ErrNilFunc is returned when the callback passed to a scheduling call is nil.
	ErrNilFunc = errors.New("tock: nil callback")

	// ErrNonPositivePeriod is returned by [Wheel.Every] and [Wheel.EveryDelay] when the period is
	// zero or negative.
	ErrNonPositivePeriod = errors.New("tock: non-positive period")
)
