package server

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/queue"
)

// maxReceiptLen bounds a receipt: a longer one is none an engine issued,
// and is refused before it reaches the engine.
const maxReceiptLen = 1024

// checkReceipt checks the receipt of a nack.
func checkReceipt(field, rc string) error {
	if rc == "" {
		return badRequest("field %q: a receipt must not be empty", field)
	}
	if len(rc) > maxReceiptLen {
		return badRequest("field %q: receipt of %d bytes is not one this server issued", field, len(rc))
	}
	return nil
}

// handleAck acks the receipts of the request and answers for each: 204
// when every receipt was acked (a receipt whose message is already done
// counts as acked), else 400 with an [api.AckErrorBody] that counts the
// acked ones and lists the indexes of the others. tock_acks_total counts
// what was acked, partial acks included. An engine failure that leaves the
// outcome of each receipt unknown is answered as any engine failure.
func (s *Server) handleAck(w http.ResponseWriter, r *http.Request) error {
	var req api.AckRequest
	if err := s.decodeBody(w, r, 4<<20, &req, false); err != nil {
		return err
	}
	rcs := req.Receipts
	if err := checkReceipts(rcs, "acked"); err != nil {
		return err
	}
	// Receipts no engine issued fail here; the others go to the engine.
	failed, send, sent := refuseUnissued(rcs)
	if len(send) > 0 {
		start := time.Now()
		err := s.engine.Ack(r.Context(), send...)
		s.metrics.wrote("ack", start)
		var ae *queue.AckError
		switch {
		case errors.As(err, &ae):
			more, ok := failedIndexes(send, sent, ae.Failed)
			if !ok {
				return fmt.Errorf("the engine's AckError lists receipts not sent to it, or out of order: %w", err)
			}
			failed = mergeFailures(failed, more)
		case err != nil:
			return err
		}
	}
	acked := len(rcs) - len(failed)
	s.metrics.acks.Add(float64(acked))
	s.activity.acked(s.now(), acked)
	if len(failed) == 0 {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return receiptsFailed(len(rcs), failed, func(b api.ErrorBody, idx []int) any {
		return api.AckErrorBody{ErrorBody: b, Acked: acked, Failed: idx}
	})
}

// checkReceipts checks the receipts of a request that answers for each
// (an ack, an extension of several): at least one, and not too short for
// an answer listing those not done (acked, extended) to fit.
func checkReceipts(rcs []string, done string) error {
	if len(rcs) == 0 {
		return badRequest("field \"receipts\" must hold at least one receipt")
	}
	if !indexesFit(rcs) {
		return badRequest("field \"receipts\": %s receipts of %s bytes in all are too short to be receipts of this server; "+
			"an answer listing those not %s would be larger than the request", thousands(len(rcs)), thousands(receiptBytes(rcs)), done)
	}
	return nil
}

// refuseUnissued returns the failures of the receipts of rcs that no engine issued (empty, or
// too long), and the others, to send to the engine, with sent[j] the index in rcs of send[j].
func refuseUnissued(rcs []string) (failed []receiptFailure, send []string, sent []int) {
	send = make([]string, 0, len(rcs))
	sent = make([]int, 0, len(rcs))
	for i, rc := range rcs {
		if rc == "" || len(rc) > maxReceiptLen {
			failed = append(failed, receiptFailure{i, fmt.Errorf("receipt of %d bytes is not one this server issued: %w", len(rc), queue.ErrUnknownReceipt)})
			continue
		}
		send = append(send, rc)
		sent = append(sent, i)
	}
	return failed, send, sent
}

// A receiptFailure is a receipt of an ack that was not acked: its index in
// the request and why.
type receiptFailure struct {
	index int
	err   error
}

// failedIndexes returns the failures an engine listed, with the index in the
// request of each receipt: send are the receipts given to the engine, in
// order, and sent[j] is the index in the request of send[j]. ok is false
// when listed names a receipt not in send or out of order, which the
// contract forbids.
func failedIndexes(send []string, sent []int, listed []queue.ReceiptError) (failed []receiptFailure, ok bool) {
	j := 0
	for _, f := range listed {
		for j < len(send) && send[j] != f.Receipt {
			j++
		}
		if j == len(send) {
			return nil, false
		}
		failed = append(failed, receiptFailure{sent[j], f.Err})
		j++
	}
	return failed, true
}

// mergeFailures merges two lists of failures in increasing order of index.
func mergeFailures(a, b []receiptFailure) []receiptFailure {
	out := make([]receiptFailure, 0, len(a)+len(b))
	for len(a) > 0 && len(b) > 0 {
		if a[0].index < b[0].index {
			out, a = append(out, a[0]), a[1:]
		} else {
			out, b = append(out, b[0]), b[1:]
		}
	}
	return append(append(out, a...), b...)
}

// receiptsFailed is the answer to an ack or extension of n receipts of
// which some failed: the message counts them and shows the first few with
// why, and the body, made by answer from the error body and the failed
// indexes, lists the index of each.
func receiptsFailed(n int, failed []receiptFailure, answer func(b api.ErrorBody, idx []int) any) error {
	msgs := make([]string, min(len(failed), maxErrorItems))
	for i := range msgs {
		msgs[i] = fmt.Sprintf("receipts[%d]: %v", failed[i].index, failed[i].err)
	}
	msg := fmt.Sprintf("%s of %s receipts failed: %s", thousands(len(failed)), thousands(n), boundedList(msgs))
	if more := len(failed) - len(msgs); more > 0 {
		msg += fmt.Sprintf("; and %s more", thousands(more))
	}
	idx := make([]int, len(failed))
	for i, f := range failed {
		idx[i] = f.index
	}
	return &requestError{status: http.StatusBadRequest, code: api.CodeUnknownReceipt, msg: msg,
		answer: func(b api.ErrorBody) any { return answer(b, idx) }}
}

// indexesFit reports whether an answer listing the index of every receipt
// of rcs would be no larger than the receipts themselves in the request:
// each index at most as long as its receipt with its quotes. Receipts that
// engines issue are far longer than their indexes (delayq's have 32
// characters); only a request of receipts a few bytes long fails this.
func indexesFit(rcs []string) bool {
	digits, next := 1, 10
	var indexes int
	for i := range rcs {
		if i == next {
			digits, next = digits+1, next*10
		}
		indexes += digits
	}
	return indexes <= receiptBytes(rcs)
}

// receiptBytes is the size of rcs as JSON strings, commas aside: at least
// their length and two quotes each.
func receiptBytes(rcs []string) int {
	n := 0
	for _, rc := range rcs {
		n += len(rc) + 2
	}
	return n
}
