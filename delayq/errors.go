package delayq

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tockwheel/tock/delayq/internal/wal"
)

// Errors returned by Queue methods. Compare with errors.Is: most are wrapped with details.
var (
	// ErrClosed is returned by every method called after Close, and by Receive calls that were
	// waiting when Close began.
	ErrClosed = errors.New("delayq: queue closed")

	// ErrInvalid is returned for a message, argument or option the queue cannot take: an empty
	// topic, an ID or topic longer than 65535 bytes, a payload over the limit, a DeliverAt past
	// the latest the queue keeps, a max or visibility timeout below one, an option out of its
	// range. The message names what was wrong.
	ErrInvalid = errors.New("delayq: invalid argument")

	// ErrUnknownReceipt is matched by the errors of Ack and Nack for a receipt that does not name
	// a message currently leased under it: malformed, forged, cancelled, or leased again since (its
	// visibility timeout ran out and another Receive took the message). Ack does not report a
	// receipt it acked before (see [Queue.Ack]); Nack does.
	ErrUnknownReceipt = errors.New("delayq: unknown or stale receipt")

	// ErrDuplicate is matched by the error of Put and PutBatch for a message whose chosen ID is
	// the ID of a different message still pending; the error is a [*DuplicateError].
	ErrDuplicate = errors.New("delayq: id of a pending message")

	// ErrCorrupt is matched by errors about damaged data in the log or the checkpoint. Such errors
	// name the file and the byte offset of the damage. A torn tail (the end of the last write cut
	// short by a crash) is not corruption: Open cuts it.
	ErrCorrupt = wal.ErrCorrupt

	// ErrLocked is returned by Open when another Queue, in this process or another, has the
	// directory open.
	ErrLocked = errors.New("delayq: directory in use by another queue")
)

// A DuplicateError is the error of a Put whose chosen ID names a different message that is still
// pending (see [Message].ID). It matches [ErrDuplicate].
type DuplicateError struct {
	ID string
	// DeliverAt is when the pending message with the ID is due.
	DeliverAt time.Time
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("delayq: id %q names a different message, pending and due at %v", e.ID, e.DeliverAt.UTC().Format(time.RFC3339Nano))
}

// Is reports whether target is ErrDuplicate.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

// An AckError is the error of an Ack some of whose receipts were not acked. The others were: the
// call's outcome is per receipt. It matches the errors of its Failed receipts, so
// errors.Is(err, [ErrUnknownReceipt]) holds when one was unknown or stale.
type AckError struct {
	// Acked counts the receipts the call acked, in addition to those it found acked already.
	Acked int
	// Failed lists the receipts not acked, in the order given, with why.
	Failed []ReceiptError
}

// A ReceiptError is one receipt an Ack could not ack, and why.
type ReceiptError struct {
	Receipt string
	Err     error
}

func (e *AckError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "delayq: %d receipts not acked", len(e.Failed))
	for i, f := range e.Failed {
		if i == 3 {
			fmt.Fprintf(&b, "; and %d more", len(e.Failed)-i)
			break
		}
		fmt.Fprintf(&b, "; %q: %v", f.Receipt, f.Err)
	}
	return b.String()
}

// Unwrap returns the errors of the failed receipts.
func (e *AckError) Unwrap() []error {
	errs := make([]error, len(e.Failed))
	for i, f := range e.Failed {
		errs[i] = f.Err
	}
	return errs
}
