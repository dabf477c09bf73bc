package server

import (
	"errors"
	"fmt"
	"net/http"
	"time"
	"unicode/utf8"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/queue"
)

// The routes that end or extend one lease: nack and extend.

// handleNack ends the lease of the request's receipt: the message is due again after its delay,
// or in the dead letters at once with dead_letter, and its reason is kept as the message's last
// failure. A reason over api.MaxReason bytes, or not UTF-8, is refused with 400 before the
// engine is asked, as is a delay beside dead_letter (which does not use one).
func (s *Server) handleNack(w http.ResponseWriter, r *http.Request) error {
	var req api.NackRequest
	if err := s.decodeBody(w, r, 64<<10, &req, false); err != nil {
		return err
	}
	if err := checkReceipt("receipt", req.Receipt); err != nil {
		return err
	}
	var delay time.Duration
	if req.Delay != nil {
		if req.DeadLetter {
			return badRequest("field \"delay\" has no use with \"dead_letter\": the message goes to the dead letters at once")
		}
		d, err := parseDuration("delay", *req.Delay)
		if err != nil {
			return err
		}
		delay = d
	}
	switch {
	case len(req.Reason) > api.MaxReason:
		return badRequest("field \"reason\": %d bytes; the longest is %d", len(req.Reason), api.MaxReason)
	case !utf8.ValidString(req.Reason):
		return badRequest("field \"reason\" is not valid UTF-8")
	}
	var opts []queue.NackOption
	if req.Reason != "" {
		opts = append(opts, queue.WithReason(req.Reason))
	}
	if req.DeadLetter {
		opts = append(opts, queue.WithDeadLetter())
	}
	start := time.Now()
	err := s.engine.Nack(r.Context(), req.Receipt, delay, opts...)
	s.metrics.wrote("nack", start)
	if err != nil {
		return err
	}
	s.metrics.nacks.Inc()
	s.activity.nacked(s.now())
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// handleExtend moves the end of the request's lease, or of each of its leases, to its visibility
// from now. For one receipt: 204, or 400 with code unknown_receipt for a receipt of no current
// lease. For receipts: 204 when every lease was extended, else 400 with an [api.ExtendErrorBody]
// that counts those extended and lists the indexes of the others; the engine extends them in one
// call when it is a queue.BatchExtender. The visibility is bounded as a receive's is
// (Limits.MaxVisibility).
func (s *Server) handleExtend(w http.ResponseWriter, r *http.Request) error {
	var req api.ExtendRequest
	if err := s.decodeBody(w, r, 4<<20, &req, false); err != nil {
		return err
	}
	switch {
	case req.Receipt != "" && req.Receipts != nil:
		return badRequest("fields \"receipt\" and \"receipts\": give one of them, not both")
	case req.Receipts == nil:
		if err := checkReceipt("receipt", req.Receipt); err != nil {
			return err
		}
	default:
		if err := checkReceipts(req.Receipts, "extended"); err != nil {
			return err
		}
	}
	if req.Visibility == "" {
		return badRequest("field \"visibility\" is required: how long from now the lease lasts, such as \"30s\"")
	}
	d, err := parseDuration("visibility", req.Visibility)
	if err != nil {
		return err
	}
	if d <= 0 || d > s.limits.MaxVisibility {
		return badRequest("field \"visibility\": %v is out of range (0s, %v]", d, s.limits.MaxVisibility)
	}
	if req.Receipts != nil {
		return s.extendBatch(w, r, req.Receipts, d)
	}
	start := time.Now()
	err = s.engine.Extend(r.Context(), req.Receipt, d)
	s.metrics.wrote("extend", start)
	if err != nil {
		return err
	}
	s.metrics.extends.Inc()
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// extendBatch extends the leases of rcs to d from now and answers for each, as an ack of
// several receipts is answered.
func (s *Server) extendBatch(w http.ResponseWriter, r *http.Request, rcs []string, d time.Duration) error {
	failed, send, sent := refuseUnissued(rcs)
	if len(send) > 0 {
		start := time.Now()
		err := queue.ExtendBatch(r.Context(), s.engine, send, d)
		s.metrics.wrote("extend", start)
		var xe *queue.ExtendError
		switch {
		case errors.As(err, &xe):
			more, ok := failedIndexes(send, sent, xe.Failed)
			if !ok {
				return fmt.Errorf("the engine's ExtendError lists receipts not sent to it, or out of order: %w", err)
			}
			failed = mergeFailures(failed, more)
		case err != nil:
			return err
		}
	}
	extended := len(rcs) - len(failed)
	s.metrics.extends.Add(float64(extended))
	if len(failed) == 0 {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return receiptsFailed(len(rcs), failed, func(b api.ErrorBody, idx []int) any {
		return api.ExtendErrorBody{ErrorBody: b, Extended: extended, Failed: idx}
	})
}
