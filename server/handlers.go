package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
)

// wireTime is how the API writes times: RFC 3339 in UTC with nanoseconds.
func wireTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

func (s *Server) handlePut(w http.ResponseWriter, r *http.Request) error {
	var req putRequest
	topic, err := s.decodeTopicRequest(w, r, s.limits.bodyLimit(), &req, false)
	if err != nil {
		return err
	}
	now := s.now()
	m, err := req.toMessage(now, s.limits.MaxPayload)
	if err != nil {
		return err
	}
	start := time.Now()
	id, err := s.store.Put(r.Context(), Message{ID: m.ID, Topic: topic, Payload: m.Payload, DeliverAt: m.DeliverAt})
	s.metrics.wrote("put", start)
	if err != nil {
		return err
	}
	s.metrics.puts.Inc()
	s.activity.put(now, []time.Time{m.DeliverAt})
	writeJSON(w, http.StatusCreated, struct {
		ID        string `json:"id"`
		DeliverAt string `json:"deliver_at"`
	}{id, wireTime(m.DeliverAt)})
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
	var req batchRequest
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
	ms := make([]Message, len(req.Messages))
	due := make([]time.Time, len(req.Messages))
	ids := make(map[string]int)
	for i := range req.Messages {
		m, err := req.Messages[i].toMessage(now, s.limits.MaxPayload)
		if err != nil {
			var re *requestError
			errors.As(err, &re)
			return &requestError{status: re.status, code: re.code, msg: fmt.Sprintf("messages[%d]: %s", i, re.msg)}
		}
		if m.ID != "" {
			if j, dup := ids[m.ID]; dup {
				return badRequest("messages[%d]: id %q repeats messages[%d]", i, m.ID, j)
			}
			ids[m.ID] = i
		}
		ms[i] = Message{ID: m.ID, Topic: topic, Payload: m.Payload, DeliverAt: m.DeliverAt}
		due[i] = m.DeliverAt
	}
	start := time.Now()
	out, err := s.store.PutBatch(r.Context(), ms)
	s.metrics.wrote("batch", start)
	if err != nil {
		return err
	}
	s.metrics.puts.Add(float64(len(ms)))
	s.activity.put(now, due)
	writeJSON(w, http.StatusCreated, struct {
		IDs []string `json:"ids"`
	}{out})
	return nil
}

func (s *Server) handleCancel(w http.ResponseWriter, r *http.Request) error {
	id := r.PathValue("id")
	if err := checkID("id", id); err != nil {
		return err
	}
	start := time.Now()
	ok, err := s.store.Cancel(r.Context(), id)
	s.metrics.wrote("cancel", start)
	if err != nil {
		return err
	}
	if !ok {
		return &requestError{status: http.StatusNotFound, code: codeNotFound, msg: fmt.Sprintf("no pending message %q", id)}
	}
	s.metrics.cancels.Inc()
	s.activity.cancelled(s.now())
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// deliveryJSON is one received message on the wire.
type deliveryJSON struct {
	ID        string          `json:"id"`
	Payload   json.RawMessage `json:"payload"`
	DeliverAt string          `json:"deliver_at"`
	Receipt   string          `json:"receipt"`
	Attempt   int             `json:"attempt"`
}

// payloadJSON returns a stored payload as a JSON value. Payloads put over
// HTTP are JSON already; one put through the Go API that is not JSON is
// delivered as a JSON string, and an empty one as null.
func payloadJSON(p []byte) json.RawMessage {
	if len(p) == 0 {
		return json.RawMessage("null")
	}
	if json.Valid(p) {
		return p
	}
	b, _ := json.Marshal(string(p)) // cannot fail for a string
	return b
}

func (s *Server) handleReceive(w http.ResponseWriter, r *http.Request) error {
	var req receiveRequest
	topic, err := s.decodeTopicRequest(w, r, 64<<10, &req, true)
	if err != nil {
		return err
	}
	p, err := req.params(s.limits)
	if err != nil {
		return err
	}
	// With no wait, still give the store a moment to hand over what is due
	// already.
	ctx, cancel := s.receiveContext(r.Context(), max(p.Wait, time.Millisecond))
	defer cancel()
	ds, err := s.store.Receive(ctx, topic, p.Max, p.Visibility)
	if err != nil && len(ds) == 0 {
		if ctx.Err() == nil || r.Context().Err() != nil {
			return err
		}
		err = nil // the wait ended: an empty answer
	}
	now := s.now()
	out := make([]deliveryJSON, len(ds))
	late := make([]time.Duration, 0, len(ds))
	for i, d := range ds {
		out[i] = deliveryJSON{
			ID:        d.ID,
			Payload:   payloadJSON(d.Payload),
			DeliverAt: wireTime(d.DeliverAt),
			Receipt:   d.Receipt,
			Attempt:   d.Attempt,
		}
		if d.Attempt <= 1 {
			l := now.Sub(d.DeliverAt)
			late = append(late, l)
			s.metrics.lateness.Observe(max(l, 0).Seconds())
		}
	}
	s.metrics.deliveries.Add(float64(len(ds)))
	s.activity.delivered(now, late)
	writeJSON(w, http.StatusOK, struct {
		Messages []deliveryJSON `json:"messages"`
	}{out})
	return nil
}

// maxReceiptLen bounds a receipt so a forged megabyte is refused before it
// reaches the store.
const maxReceiptLen = 1024

func checkReceipt(field, rc string) error {
	if rc == "" {
		return badRequest("field %q: a receipt must not be empty", field)
	}
	if len(rc) > maxReceiptLen {
		return badRequest("field %q: receipt of %d bytes is not one this server issued", field, len(rc))
	}
	return nil
}

func (s *Server) handleAck(w http.ResponseWriter, r *http.Request) error {
	var req ackRequest
	if err := s.decodeBody(w, r, 4<<20, &req, false); err != nil {
		return err
	}
	if len(req.Receipts) == 0 {
		return badRequest("field \"receipts\" must hold at least one receipt")
	}
	for i, rc := range req.Receipts {
		if err := checkReceipt(fmt.Sprintf("receipts[%d]", i), rc); err != nil {
			return err
		}
	}
	start := time.Now()
	err := s.store.Ack(r.Context(), req.Receipts...)
	s.metrics.wrote("ack", start)
	if err != nil {
		return ackError(err, len(req.Receipts))
	}
	s.metrics.acks.Add(float64(len(req.Receipts)))
	s.activity.acked(s.now(), len(req.Receipts))
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// ackError bounds the error of an ack of n receipts: an error that lists
// the receipts that failed (one per receipt) is answered with how many
// failed and the first few, never with all of them.
func ackError(err error, n int) error {
	items := errorItems(err)
	if len(items) == 0 || !errors.Is(err, ErrInvalid) {
		return err
	}
	msgs := make([]string, len(items))
	for i, e := range items {
		msgs[i] = e.Error()
	}
	return badRequest("%s of %s receipts failed: %s", thousands(len(items)), thousands(n), boundedList(msgs))
}

func (s *Server) handleNack(w http.ResponseWriter, r *http.Request) error {
	var req nackRequest
	if err := s.decodeBody(w, r, 64<<10, &req, false); err != nil {
		return err
	}
	if err := checkReceipt("receipt", req.Receipt); err != nil {
		return err
	}
	var delay time.Duration
	if req.Delay != nil {
		d, err := parseDuration("delay", *req.Delay)
		if err != nil {
			return err
		}
		delay = d
	}
	start := time.Now()
	err := s.store.Nack(r.Context(), req.Receipt, delay)
	s.metrics.wrote("nack", start)
	if err != nil {
		return err
	}
	s.metrics.nacks.Inc()
	s.activity.nacked(s.now())
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// Stats is the answer of GET /v1/stats: the store's counts, this server's
// totals since it started, lateness, the recent history and the forecast
// of what falls due. Totals and history are kept in memory: they start
// from zero when the server restarts.
type Stats struct {
	Time          time.Time `json:"time"`
	UptimeSeconds float64   `json:"uptime_seconds"`
	Pending       int64     `json:"pending"`
	Due           int64     `json:"due"`
	Leased        int64     `json:"leased"`
	Puts          uint64    `json:"puts"`
	Deliveries    uint64    `json:"deliveries"`
	Acks          uint64    `json:"acks"`
	Nacks         uint64    `json:"nacks"`
	Cancels       uint64    `json:"cancels"`
	// Lateness is the time from due to first delivery over the last
	// minute: the queue's own lateness plus any time messages waited for a
	// consumer to ask.
	Lateness Lateness `json:"lateness"`
	// QueueLateness is the queue's own lateness: how long after their due
	// time recent messages became available to receive, whether or not a
	// consumer was there to take them.
	QueueLateness QueueLateness `json:"queue_lateness"`
	History       History       `json:"history"`
	Forecast      Forecast      `json:"forecast"`
}

// QueueLateness summarizes the store's recent lateness, in seconds (see
// [StoreStats]). It is zero for a store that does not measure it.
type QueueLateness struct {
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

// Forecast counts messages falling due in each second from Start (a Unix
// second) on.
type Forecast struct {
	Start int64 `json:"start"`
	Due   []int `json:"due"`
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
	hist, err := queryInt(r, "history", 300, historySeconds-1)
	if err != nil {
		return err
	}
	ahead, err := queryInt(r, "forecast", forecastSeconds, forecastSeconds)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, s.stats(s.now(), hist, ahead))
	return nil
}

func (s *Server) stats(now time.Time, hist, ahead int) Stats {
	st := s.store.Stats()
	h, late := s.activity.history(now, hist, 60)
	f := Forecast{Start: now.Unix() + 1}
	if dc, ok := s.store.(DueCounter); ok {
		f.Due = dc.DueCounts(time.Unix(f.Start, 0), time.Second, ahead)
	} else {
		f.Due = s.activity.dueCounts(now, ahead)
	}
	return Stats{
		Time:          now.UTC(),
		UptimeSeconds: now.Sub(s.started).Seconds(),
		Pending:       st.Pending,
		Due:           st.Due,
		Leased:        st.Leased,
		Puts:          counterValue(s.metrics.puts),
		Deliveries:    counterValue(s.metrics.deliveries),
		Acks:          counterValue(s.metrics.acks),
		Nacks:         counterValue(s.metrics.nacks),
		Cancels:       counterValue(s.metrics.cancels),
		Lateness:      late,
		QueueLateness: QueueLateness{P50: seconds(st.LatenessP50), P99: seconds(st.LatenessP99), Max: seconds(st.LatenessMax)},
		History:       h,
		Forecast:      f,
	}
}
