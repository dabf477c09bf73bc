package queue

import (
	"errors"
	"fmt"
	"strings"
	"time"
)

// Errors an [Engine] reports. Engines wrap them with details (their own package name first, as in
// "delayq: topic is empty: invalid argument"), so compare with [errors.Is]. Their texts carry no
// package name for that reason, as those of io/fs do.
var (
	// ErrInvalid reports an argument the engine cannot take: an empty topic, a due time out of
	// range, a max or visibility timeout below one.
	ErrInvalid = errors.New("invalid argument")
	// ErrTooLarge reports a message or batch over the engine's limits.
	ErrTooLarge = errors.New("too large")
	// ErrNotFound reports that a named message or topic does not exist.
	ErrNotFound = errors.New("not found")
	// ErrUnknownReceipt reports a receipt that names no current lease: malformed, forged, or
	// stale (its lease ran out and another consumer has leased the message since).
	ErrUnknownReceipt = errors.New("unknown or stale receipt")
	// ErrDuplicate reports a Put whose chosen ID names a waiting message that differs from the one
	// put. Errors matching it are *DuplicateError.
	ErrDuplicate = errors.New("duplicate message ID")
	// ErrUnavailable reports an engine that cannot serve now but may later: its storage is down,
	// out of memory, or failing over. Nothing was done unless the error says otherwise.
	ErrUnavailable = errors.New("queue unavailable")
	// ErrClosed reports a call on an engine after Close began.
	ErrClosed = errors.New("queue closed")
)

// A DuplicateError is the error of a Put whose chosen ID names a waiting message that differs from
// the one put: another topic, payload or due time. It matches [ErrDuplicate].
type DuplicateError struct {
	// ID is the chosen ID.
	ID string
	// DeliverAt is the due time of the message already waiting.
	DeliverAt time.Time
	// Leased reports a Put with Replace set that found the message leased to a consumer, which
	// a Put does not replace.
	Leased bool
}

func (e *DuplicateError) Error() string {
	if e.Leased {
		return fmt.Sprintf("message %q is leased to a consumer and cannot be replaced: %v", e.ID, ErrDuplicate)
	}
	return fmt.Sprintf("message %q is already waiting, due at %s: %v",
		e.ID, e.DeliverAt.UTC().Format(time.RFC3339Nano), ErrDuplicate)
}

// Is makes a DuplicateError match ErrDuplicate.
func (e *DuplicateError) Is(target error) bool { return target == ErrDuplicate }

// An AckError is the error of an Ack that could not ack every receipt it was given. The receipts
// it does not list were acked.
type AckError struct {
	// Failed lists the receipts that were not acked, in the order given, with why.
	Failed []ReceiptError
}

// A ReceiptError is one receipt that Ack, Nack or ExtendBatch could not take, and why. Err matches
// [ErrUnknownReceipt] for a receipt that names no current lease.
type ReceiptError struct {
	Receipt string
	Err     error
}

// maxListed bounds the receipts an AckError's message names, so that an error is never larger than
// the request that caused it.
const maxListed = 3

func (e *AckError) Error() string { return receiptsError("acked", e.Failed) }

// receiptsError is the message of an error listing the receipts that were not done (acked,
// extended), with why: the first maxListed, and how many more.
func receiptsError(done string, failed []ReceiptError) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d receipt(s) not %s: ", len(failed), done)
	for i, f := range failed {
		if i == maxListed {
			fmt.Fprintf(&b, "; and %d more", len(failed)-maxListed)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%.40q: %v", f.Receipt, f.Err)
	}
	return b.String()
}

// Unwrap returns the distinct reasons the receipts failed, so that errors.Is(err,
// ErrUnknownReceipt) reports whether any receipt failed for that reason.
func (e *AckError) Unwrap() []error { return receiptReasons(e.Failed) }

// receiptReasons returns the distinct errors of failed.
func receiptReasons(failed []ReceiptError) []error {
	var errs []error
	for _, f := range failed {
		seen := false
		for _, x := range errs {
			if x == f.Err {
				seen = true
				break
			}
		}
		if !seen {
			errs = append(errs, f.Err)
		}
	}
	return errs
}
