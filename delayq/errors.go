package delayq

import (
	"errors"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// Errors returned by Queue methods. Compare with errors.Is: most are wrapped with details.
var (
	// ErrClosed is returned by every method called after Close, and by Receive calls that were
	// waiting when Close began.
	ErrClosed = errors.New("delayq: queue closed")

	// ErrInvalid is returned for a message or argument the queue cannot take: an empty topic, an ID
	// or topic longer than 65535 bytes, a payload over the limit, a max or visibility timeout below
	// one.
	ErrInvalid = errors.New("delayq: invalid argument")

	// ErrUnknownReceipt is returned by Ack and Nack for a receipt that does not name a message
	// currently leased under it: malformed, already acked, cancelled, or leased again since (its
	// visibility timeout ran out and another Receive took the message).
	ErrUnknownReceipt = errors.New("delayq: unknown or stale receipt")

	// ErrCorrupt is matched by errors about damaged data in the log or the checkpoint. Such errors
	// name the file and the byte offset of the damage. A torn tail (the end of the last write cut
	// short by a crash) is not corruption: Open truncates it.
	ErrCorrupt = wal.ErrCorrupt

	// ErrLocked is returned by Open when another Queue, in this process or another, has the
	// directory open.
	ErrLocked = errors.New("delayq: directory in use by another queue")
)
