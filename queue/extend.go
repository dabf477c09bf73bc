package queue

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A BatchExtender is an [Engine] that extends many leases in one call, as Ack ends many: a
// consumer that holds many messages at once (package worker holds one per running handler)
// extends those due together for about the cost of one Extend, where an Extend each would cost a
// request, a round trip or a script each. It is optional, as [Admin] is; [ExtendBatch] calls it
// when an engine has it, and Extend for each receipt otherwise.
type BatchExtender interface {
	Engine

	// ExtendBatch is [Engine.Extend] of each of receipts with the same visibility: each lease
	// then ends visibility from the call. The outcome is per receipt, as Ack's: it extends every
	// receipt it can, and when some name no current lease it returns an [*ExtendError] listing
	// them (each matching ErrUnknownReceipt), in the order given; the others were extended. Any
	// other error concerns the whole call (a visibility that is not positive, ErrInvalid; the
	// context's end; ErrUnavailable), and then any receipt may or may not have been extended,
	// as after an Extend that failed so. No receipts is no work, and nil.
	ExtendBatch(ctx context.Context, receipts []string, visibility time.Duration) error
}

// An ExtendError is the error of an ExtendBatch that could not extend every receipt it was
// given. The receipts it does not list were extended.
type ExtendError struct {
	// Failed lists the receipts that were not extended, in the order given, with why.
	Failed []ReceiptError
}

func (e *ExtendError) Error() string { return receiptsError("extended", e.Failed) }

// Unwrap returns the distinct reasons the receipts failed, so that errors.Is(err,
// ErrUnknownReceipt) reports whether any receipt failed for that reason.
func (e *ExtendError) Unwrap() []error { return receiptReasons(e.Failed) }

// ExtendBatch extends the leases of receipts on e to visibility from the call: with one call of
// e's [BatchExtender.ExtendBatch] when e has it, and otherwise with [Engine.Extend] of each
// receipt in turn, whose refusals (ErrUnknownReceipt) it gathers in an [*ExtendError] as
// ExtendBatch does; any other error of an Extend ends the call with it.
func ExtendBatch(ctx context.Context, e Engine, receipts []string, visibility time.Duration) error {
	if b, ok := e.(BatchExtender); ok {
		return b.ExtendBatch(ctx, receipts, visibility)
	}
	if visibility <= 0 {
		return fmt.Errorf("queue: ExtendBatch visibility %v: %w", visibility, ErrInvalid)
	}
	var failed []ReceiptError
	for _, rc := range receipts {
		err := e.Extend(ctx, rc, visibility)
		switch {
		case err == nil:
		case errors.Is(err, ErrUnknownReceipt):
			failed = append(failed, ReceiptError{Receipt: rc, Err: err})
		default:
			return err
		}
	}
	if len(failed) > 0 {
		return &ExtendError{Failed: failed}
	}
	return nil
}
