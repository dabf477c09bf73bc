package redisq

import (
	"context"
	"errors"
	"fmt"

	"github.com/tockwheel/tock/internal/rediskit"
	"github.com/tockwheel/tock/queue"
)

// The engine classifies Redis's errors as package redislock does, with package rediskit: whether
// a reply proves the script did not run (rediskit.Refused: it may be sent again, or elsewhere),
// whether sending it again may pass (rediskit.Transient), and whether a cluster client should
// reload its topology (rediskit.Reloads).

// unavailable wraps an error of Redis as queue.ErrUnavailable, saying what happened (which node
// could not be reached and why, or what state Redis's refusal reports) and, for a command Redis
// refused, that nothing was written; context errors and errors that already match are returned as
// they are.
func unavailable(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded), errors.Is(err, queue.ErrUnavailable):
		return err
	case rediskit.Refused(err):
		return fmt.Errorf("%w: %s; nothing was written", queue.ErrUnavailable, rediskit.Describe(err))
	}
	return fmt.Errorf("%w: %s", queue.ErrUnavailable, rediskit.Describe(err))
}
