package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/internal/wirejson"
	"github.com/tockwheel/tock/queue"
)

func (s *Server) handlePut(w http.ResponseWriter, r *http.Request) error {
	var req api.PutRequest
	topic, err := s.decodeTopicRequest(w, r, s.limits.bodyLimit(), &req, false)
	if err != nil {
		return err
	}
	now := s.now()
	m, err := toMessage(&req, now, s.limits.MaxPayload)
	if err != nil {
		return err
	}
	start := time.Now()
	id, err := s.engine.Put(r.Context(), queue.Message{ID: m.ID, Topic: topic, Payload: m.Payload, Headers: m.Headers, DeliverAt: m.DeliverAt, Replace: req.Replace})
	s.metrics.wrote("put", start)
	if err != nil {
		return err
	}
	s.metrics.puts.Inc()
	s.activity.put(now, 1)
	res := api.PutResponse{ID: id, DeliverAt: m.DeliverAt.UTC()}
	s.writeAppended(w, http.StatusCreated, res.AppendJSON)
	return nil
}

// decodeTopicRequest checks the topic in r's path and decodes r's body, of at most limit bytes,
// into req (see decodeJSON for allowEmpty).
func (s *Server) decodeTopicRequest(w http.ResponseWriter, r *http.Request, limit int64, req any, allowEmpty bool) (string, error) {
	topic := r.PathValue("topic")
	if err := checkTopic(topic); err != nil {
		return "", err
	}
	return topic, s.decodeBody(w, r, limit, req, allowEmpty)
}

func (s *Server) handleBatch(w http.ResponseWriter, r *http.Request) error {
	var req api.BatchRequest
	topic, err := s.decodeTopicRequest(w, r, s.limits.batchBodyLimit(), &req, false)
	if err != nil {
		return err
	}
	switch {
	case len(req.Messages) == 0:
		return badRequest("field \"messages\" must hold at least one message")
	case len(req.Messages) > s.limits.MaxBatch:
		return tooLarge("a batch holds at most %d messages, not %d", s.limits.MaxBatch, len(req.Messages))
	}
	now := s.now()
	ms := make([]queue.Message, len(req.Messages))
	ids := make(map[string]int)
	for i := range req.Messages {
		m, err := toMessage(&req.Messages[i], now, s.limits.MaxPayload)
		if err != nil {
			var re *requestError
			errors.As(err, &re)
			return &requestError{status: re.status, code: re.code, msg: fmt.Sprintf("messages[%d]: %s", i, re.msg)}
		}
		if req.Messages[i].Replace {
			return badRequest("messages[%d]: field \"replace\": a batch does not replace; put the message alone", i)
		}
		if m.ID != "" {
			if j, dup := ids[m.ID]; dup {
				return badRequest("messages[%d]: id %q repeats messages[%d]", i, m.ID, j)
			}
			ids[m.ID] = i
		}
		ms[i] = queue.Message{ID: m.ID, Topic: topic, Payload: m.Payload, Headers: m.Headers, DeliverAt: m.DeliverAt}
	}
	start := time.Now()
	out, err := s.engine.PutBatch(r.Context(), ms)
	s.metrics.wrote("batch", start)
	var dup *queue.DuplicateError
	if errors.As(err, &dup) {
		// Say which message of the batch it was.
		return duplicate(dup, fmt.Sprintf("messages[%d]: %s", ids[dup.ID], boundedMessage(err)))
	}
	if err != nil {
		return err
	}
	s.metrics.puts.Add(float64(len(ms)))
	s.activity.put(now, len(ms))
	due := make([]time.Time, len(ms))
	for i := range ms {
		due[i] = ms[i].DeliverAt.UTC()
	}
	res := api.BatchResponse{IDs: out, DeliverAt: due}
	s.writeAppended(w, http.StatusCreated, res.AppendJSON)
	return nil
}

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := checkID("id", id); err != nil {
		return err
	}
	start := time.Now()
	ok, err := s.engine.Cancel(r.Context(), id)
	s.metrics.wrote("cancel", start)
	if err != nil {
		return err
	}
	if !ok {
		return &requestError{status: http.StatusNotFound, code: api.CodeNotFound, msg: fmt.Sprintf("no pending message %q", id)}
	}
	s.metrics.cancels.Inc()
	s.activity.cancelled(s.now())
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// payloadJSON returns a stored payload as a compact JSON value. Payloads put
// over HTTP are compact JSON already; one put through the Go API that is
// not JSON is delivered as a JSON string, and an empty one as null.
func payloadJSON(p []byte) json.RawMessage {
	if len(p) == 0 {
		return json.RawMessage("null")
	}
	if ok, compact := wirejson.Valid(p); ok && compact {
		return p
	}
	if json.Valid(p) {
		var b bytes.Buffer
		_ = json.Compact(&b, p) // cannot fail for valid JSON
		return b.Bytes()
	}
	b, _ := json.Marshal(string(p)) // cannot fail for a string
	return b
}

func (s *Server) handleReceive(w http.ResponseWriter, r *http.Request) error {
	var req api.ReceiveRequest
	topic, err := s.decodeTopicRequest(w, r, 64<<10, &req, true)
	if err != nil {
		return err
	}
	p, err := receiveParamsOf(&req, s.limits)
	if err != nil {
		return err
	}
	// With no wait, still give the engine a moment to hand over what is due
	// already.
	ctx, cancel := s.receiveContext(r.Context(), max(p.Wait, time.Millisecond))
	defer cancel()
	ds, err := s.engine.Receive(ctx, topic, p.Max, p.Visibility)
	if err != nil && len(ds) == 0 {
		if ctx.Err() == nil || r.Context().Err() != nil {
			return err
		}
		err = nil // the wait ended: an empty answer
	}
	if len(ds) > 0 && r.Context().Err() != nil {
		s.release(ds)
		return r.Context().Err()
	}
	now := s.now()
	out := make([]api.Delivery, len(ds))
	late := make([]time.Duration, 0, len(ds))
	var series *topicSeries // looked up once a first delivery is late-measured

	for i, d := range ds {
		out[i] = api.Delivery{
			ID:        d.ID,
			Payload:   payloadJSON(d.Payload),
			DeliverAt: d.DeliverAt.UTC(),
			Receipt:   d.Receipt,
			Attempt:   d.Attempt,
			Headers:   d.Headers,
		}
		if d.Attempt <= 1 {
			l := now.Sub(d.DeliverAt)
			late = append(late, l)
			if series == nil {
				series = s.metrics.topics.of(topic)
			}
			series.lateness.Observe(max(l, 0).Seconds())
		}
	}
	s.metrics.deliveries.Add(float64(len(ds)))
	s.activity.delivered(now, late)
	res := api.ReceiveResponse{Messages: out}
	s.writeAppended(w, http.StatusOK, res.AppendJSON)
	return nil
}

// release nacks, due again at once, deliveries leased for a client that went away before they
// could be sent: otherwise they would wait out their visibility timeout although no consumer has
// them. The attempt counts as failed, as the expired lease would have. The client may go away
// after this check too; then only the lease's end brings the messages back.
func (s *Server) release(ds []queue.Delivery) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, d := range ds {
		if err := s.engine.Nack(ctx, d.Receipt, 0); err != nil {
			s.log.Warn("receive: releasing a delivery its client went away before getting", "id", d.ID, "err", err)
		}
	}
	s.log.Info("receive: the client went away; its deliveries are due again", "count", len(ds))
}

// queryInt parses the query parameter name as an integer in [0, max],
// returning def when it is absent.
func queryInt(r *http.Request, name string, def, max int) (int, error) {
	v := r.URL.Query().Get(name)
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > max {
		return 0, badRequest("query parameter %q must be an integer from 0 to %d", name, max)
	}
	return n, nil
}

func (s *Server) handleStats(w http.ResponseWriter, r *http.Request) error {
	hist, err := queryInt(r, api.QueryHistory, 300, historySeconds-1)
	if err != nil {
		return err
	}
	ahead, err := queryInt(r, api.QueryForecast, forecastSeconds, forecastSeconds)
	if err != nil {
		return err
	}
	st, err := s.stats(r, s.now(), hist, ahead)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, st)
	return nil
}

// stats returns the engine's counts and forecast beside the server's
// totals and history: hist seconds back and ahead seconds on from now.
func (s *Server) stats(r *http.Request, now time.Time, hist, ahead int) (api.Stats, error) {
	st, err := s.engine.Stats(r.Context())
	if err != nil {
		return api.Stats{}, err
	}
	f := api.Forecast{Start: now.Unix() + 1, Due: []int{}}
	if ahead > 0 {
		if f.Due, err = s.engine.DueCounts(r.Context(), time.Unix(f.Start, 0), time.Second, ahead); err != nil {
			return api.Stats{}, err
		}
	}
	h, late := s.activity.history(now, hist, 60)
	return api.Stats{
		Time:          now.UTC(),
		UptimeSeconds: now.Sub(s.started).Seconds(),
		Scheduled:     st.Scheduled,
		Due:           st.Due,
		Leased:        st.Leased,
		Puts:          counterValue(s.metrics.puts),
		Deliveries:    counterValue(s.metrics.deliveries),
		Acks:          counterValue(s.metrics.acks),
		Nacks:         counterValue(s.metrics.nacks),
		Cancels:       counterValue(s.metrics.cancels),
		Lateness:      late,
		QueueLateness: api.QueueLateness{P50: seconds(st.Lateness.P50), P99: seconds(st.Lateness.P99), Max: seconds(st.Lateness.Max)},
		History:       h,
		Forecast:      f,
	}, nil
}
