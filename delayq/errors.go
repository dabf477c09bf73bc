package delayq

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/tockwheel/tock/delayq/internal/wal"
	"github.com/tockwheel/tock/queue"
)

// Errors returned by Queue methods. Those that mean what package queue's sentinels mean are
// queue's, as package os re-exports those of io/fs, so that code written against [queue.Engine]
// and code using a Queue compare with the same values. Compare with errors.Is: the queue wraps
// them with details, its package name first.
var (
	// ErrClosed is returned by every method called after Close, and by Receive calls that were
	// waiting when Close began.
	ErrClosed = queue.ErrClosed

	// ErrInvalid is returned for a message, argument or option the queue cannot take: an empty
	// topic, an ID or topic longer than 65535 bytes, a DeliverAt past the latest the queue keeps
	// ([queue.MaxDeliverAt]), a max or visibility timeout below one, a negative Nack delay, an
	// option out of its range, a malformed paging cursor. The message names what was wrong.
	ErrInvalid = queue.ErrInvalid

	// ErrTooLarge is returned by Put and PutBatch for a payload over the limit ([WithMaxPayload])
	// or a batch over [MaxBatchBytes].
	ErrTooLarge = queue.ErrTooLarge

	// ErrNotFound is returned by [Queue.Message] for an ID that names no waiting message.
	ErrNotFound = queue.ErrNotFound

	// ErrUnknownReceipt is matched by the errors of Ack and Nack for a receipt that does not name
	// a message currently leased under it: malformed, forged, or leased again since (its
	// visibility timeout ran out and another Receive took the message). Ack does not report a
	// receipt whose message is done (see [Queue.Ack]); Nack does.
	ErrUnknownReceipt = queue.ErrUnknownReceipt

	// ErrDuplicate is matched by the error of Put and PutBatch for a message whose chosen ID is
	// the ID of a different message still waiting; the error is a [*DuplicateError].
	ErrDuplicate = queue.ErrDuplicate

	// ErrUnavailable is matched by the errors of a queue stopped by a failure it cannot recover
	// from while open: a write or sync of the log or the checkpoint failed (a full or failing
	// disk; the cause, syscall.ENOSPC say, is in the error's chain too), or the wheel given with
	// [WithWheel] was stopped. The calls in flight then fail with it (their writes were not
	// acknowledged), so do waiting Receive calls and every later call, and [Queue.Ready] reports
	// it, until the queue is closed and opened again (see the package doc, A full disk). Open
	// fails with it while the disk is still full or failing.
	ErrUnavailable = queue.ErrUnavailable

	// ErrCorrupt is matched by errors about damaged data in the log or the checkpoint. Such errors
	// name the file and the byte offset of the damage. A torn tail (the end of the last write cut
	// short by a crash) is not corruption: Open cuts it.
	ErrCorrupt = wal.ErrCorrupt

	// ErrLocked is returned by Open when another Queue, in this process or another, has the
	// directory open.
	ErrLocked = errors.New("delayq: directory in use by another queue")
)

// The errors the queue returns as they are, with its package name.
var (
	errClosed         = fmt.Errorf("delayq: %w", ErrClosed)
	errUnknownReceipt = fmt.Errorf("delayq: %w", ErrUnknownReceipt)
)

// A DuplicateError is the error of a Put whose chosen ID names a different message that is still
// waiting (see [Message].ID). It matches [ErrDuplicate].
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

// failure is a failure that stopped the queue: it reads as its cause, unwraps to it, and matches
// ErrUnavailable.
type failure struct{ err error }

func (f *failure) Error() string        { return f.err.Error() }
func (f *failure) Unwrap() error        { return f.err }
func (f *failure) Is(target error) bool { return target == ErrUnavailable }

// diskFailed reports whether err is a full or failing disk's: no space, a quota reached, an I/O
// error.
func diskFailed(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || errors.Is(err, syscall.EIO)
}
