package retry

import "errors"

// Errors returned by the package. Compare with [errors.Is]: they are wrapped with details.
var (
	// ErrClosed is returned by [Queue.Add] after [Queue.Close].
	ErrClosed = errors.New("retry: queue closed")

	// ErrFull is returned by [Queue.Add] when the queue already holds the number of keys set with
	// [WithMaxPending]. The key is not added; the overflow hook ([WithOnOverflow]) is called.
	ErrFull = errors.New("retry: queue full")

	// ErrAlreadyPending is returned by [Queue.Add] when the key is already in the queue: its first
	// operation stays and the new one is not added.
	ErrAlreadyPending = errors.New("retry: key already pending")

	// ErrGaveUp is wrapped, with the last error of the operation, into the error that [Do] returns
	// and that the give-up hook receives when retries stop without success: attempts or time ran out
	// ([WithMaxAttempts], [WithMaxElapsed]), or the wheel would not take the next attempt.
	ErrGaveUp = errors.New("retry: gave up")

	// ErrPanicked is wrapped into the error the give-up hook receives when an operation run by a
	// [Queue] panicked. A panic is not retried.
	ErrPanicked = errors.New("retry: operation panicked")

	// ErrInvalidOption is wrapped into the value [New] panics with and the error [Do] returns when
	// an option has an invalid value (each option says which values it refuses), and into the
	// error [Queue.Add] and Do return when the operation is nil.
	ErrInvalidOption = errors.New("retry: invalid option")
)
