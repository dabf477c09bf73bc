package server

import (
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

// handleExtend moves the end of the request's lease to its visibility from now: 204, or 400 with
// code unknown_receipt for a receipt of no current lease. The visibility is bounded as a
// receive's is (Limits.MaxVisibility).
func (s *Server) handleExtend(w http.ResponseWriter, r *http.Request) error {
	var req api.ExtendRequest
	if err := s.decodeBody(w, r, 64<<10, &req, false); err != nil {
		return err
	}
	if err := checkReceipt("receipt", req.Receipt); err != nil {
		return err
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
