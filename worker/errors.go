package worker

import (
	"errors"
	"fmt"
	"time"
)

// Errors a Worker gives its handlers as the cause of their context's end ([context.Cause]).
var (
	// ErrLeaseLost is the cause of a handler's context ending because its message's lease could not
	// be kept: the engine refused to extend it (it ran out, or the message was cancelled or
	// requeued), or did not answer until it ended. The message may be delivered to another consumer
	// by then.
	ErrLeaseLost = errors.New("worker: lease lost")
	// ErrShutdown is the cause of a handler's context ending because the Worker's shutdown timeout
	// passed while it ran; its message is handed back, due at once.
	ErrShutdown = errors.New("worker: shut down before the handler returned")
)

// Permanent wraps err so that the message whose handler returned it goes to the dead letters at
// once, whatever its attempts, with err's text as the reason: for a message that can never
// succeed, such as one that does not parse. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return "permanent: " + e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// RetryAfter wraps err so that the message whose handler returned it is due again after d rather
// than after the Worker's backoff: for a failure that says when to try again, such as an HTTP
// 429 with Retry-After. A negative d means at once. RetryAfter(nil, d) is nil.
func RetryAfter(err error, d time.Duration) error {
	if err == nil {
		return nil
	}
	return &retryAfterError{err, max(d, 0)}
}

type retryAfterError struct {
	err   error
	after time.Duration
}

func (e *retryAfterError) Error() string { return e.err.Error() }
func (e *retryAfterError) Unwrap() error { return e.err }

// A PanicError is the error a handler's panic is turned into: the value it panicked with and the
// stack, which the Worker logs.
type PanicError struct {
	Value any
	Stack []byte
}

func (e *PanicError) Error() string { return fmt.Sprintf("panic: %v", e.Value) }
