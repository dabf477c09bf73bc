package redisq

import (
	"errors"
	"fmt"

	"github.com/tockwheel/tock/queue"
)

// Errors returned by Queue methods. Those that mean what package queue's sentinels mean are
// queue's, as delayq's are and as package os re-exports those of io/fs, so that code written
// against [queue.Engine] and code using a Queue compare with the same values. Compare with
// errors.Is: the queue wraps them with details, its package name first.
var (
	// ErrClosed is returned by every method called after Close, and by Receive calls that were
	// waiting when Close began.
	ErrClosed = queue.ErrClosed

	// ErrInvalid is returned for a message or argument the queue cannot take: an empty topic, an
	// ID or topic over its limit, a DeliverAt past [queue.MaxDeliverAt], a max or visibility
	// below one, a negative Nack delay, a malformed paging cursor; and, as [ErrInvalidOption], for
	// an invalid option. The message names what was wrong.
	ErrInvalid = queue.ErrInvalid

	// ErrTooLarge is returned by Put and PutBatch for a payload over the limit
	// ([WithMaxPayload]).
	ErrTooLarge = queue.ErrTooLarge

	// ErrNotFound is returned by [Queue.Message] for an ID that names no waiting message.
	ErrNotFound = queue.ErrNotFound

	// ErrUnknownReceipt is matched by the errors of Ack and Nack for a receipt that does not name
	// a message currently leased under it: malformed, forged, or leased again since.
	ErrUnknownReceipt = queue.ErrUnknownReceipt

	// ErrDuplicate is matched by the error of Put and PutBatch for a message whose chosen ID is
	// the ID of a different message still waiting; the error is a [*DuplicateError].
	ErrDuplicate = queue.ErrDuplicate

	// ErrUnavailable is matched by the errors of calls that Redis could not serve: unreachable,
	// refusing (a failover, a migration, maxmemory), a write no replica confirmed in time, or a
	// deployment that Redis forgot and this process cannot adopt (see [Queue.Ready]). The message
	// says which.
	ErrUnavailable = queue.ErrUnavailable

	// ErrInvalidOption is returned by Open for an invalid option, or a client of a type it does
	// not take; the message names it. It matches [ErrInvalid] (queue.ErrInvalid) too, as
	// delayq's bad options do.
	ErrInvalidOption error = invalidOption{}

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

// invalidOption is ErrInvalidOption: a sentinel of its own that matches queue.ErrInvalid.
type invalidOption struct{}

func (invalidOption) Error() string { return "redisq: invalid option" }
func (invalidOption) Unwrap() error { return queue.ErrInvalid }

// A DuplicateError is the error of a Put whose chosen ID names a different message that is still
// waiting. It matches [ErrDuplicate].
type DuplicateError = queue.DuplicateError

// An AckError is the error of an Ack some of whose receipts were not acked. The others were: the
// call's outcome is per receipt. It matches the errors of its Failed receipts, so
// errors.Is(err, [ErrUnknownReceipt]) holds when one was unknown or stale.
type AckError = queue.AckError

// An ExtendError is the error of an ExtendBatch some of whose receipts were not extended. The
// others were. It matches the errors of its Failed receipts, as AckError does.
type ExtendError = queue.ExtendError

// A ReceiptError is one receipt an Ack or ExtendBatch could not take, and why.
type ReceiptError = queue.ReceiptError
