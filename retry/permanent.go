package retry

import "errors"

// Permanent wraps err to tell [Do] and [Queue] that the failure is not worth retrying: they stop at
// once, and Do returns err itself. [errors.Is] and [errors.As] see through the wrapper.
// Permanent(nil) returns nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// permanent returns the error that err wraps with Permanent, if it does.
func permanent(err error) (error, bool) {
	var p *permanentError
	if errors.As(err, &p) {
		return p.err, true
	}
	return nil, false
}
