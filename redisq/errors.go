package redisq

import (
	"errors"
	"fmt"
)

// Errors of the package beyond those of package queue, which the engine's methods return wrapped
// (queue.ErrInvalid, queue.ErrUnavailable, ...). Compare with errors.Is.
var (
	// ErrInvalidOption is returned by Open for an invalid option; the message names it.
	ErrInvalidOption = errors.New("redisq: invalid option")

	// ErrMismatch is returned by Open when the deployment in Redis was created with another shard
	// count than the one given with WithShards, or by an incompatible version of this package
	// (then the error matches ErrIncompatible too).
	ErrMismatch = errors.New("redisq: deployment does not match")

	// ErrIncompatible is returned by Open when the deployment in Redis has a layout version that
	// this version of the package does not read (see the package doc, Caveats); it matches
	// ErrMismatch. The message names both versions and what to do. Nothing is migrated.
	ErrIncompatible = fmt.Errorf("%w: incompatible layout version", ErrMismatch)

	// ErrProtocol is matched by errors about a reply of a shape the engine did not expect, as when
	// the keys were written by something that does not follow the package's layout.
	ErrProtocol = errors.New("redisq: unexpected reply from Redis")
)
