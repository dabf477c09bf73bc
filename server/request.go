package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// MaxNameLen is the longest topic name or message id the API accepts.
const MaxNameLen = 128

// Request bodies, exactly as the API documents them. Unknown fields are
// rejected so that a misspelt "delay" is an error, not a message due now.
type (
	putRequest struct {
		ID        string          `json:"id,omitempty"`
		Payload   json.RawMessage `json:"payload,omitempty"`
		Delay     *string         `json:"delay,omitempty"`
		DeliverAt *string         `json:"deliver_at,omitempty"`
	}
	batchRequest struct {
		Messages []putRequest `json:"messages"`
	}
	receiveRequest struct {
		Max        *int    `json:"max,omitempty"`
		Wait       *string `json:"wait,omitempty"`
		Visibility *string `json:"visibility,omitempty"`
	}
	ackRequest struct {
		Receipts []string `json:"receipts"`
	}
	nackRequest struct {
		Receipt string  `json:"receipt"`
		Delay   *string `json:"delay,omitempty"`
	}
)

// A requestError is a client's mistake: it is answered with its status and
// message as {"error": message}, never with a 500.
type requestError struct {
	status int
	msg    string
}

func (e *requestError) Error() string { return e.msg }

func badRequest(format string, args ...any) error {
	return &requestError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

func tooLarge(format string, args ...any) error {
	return &requestError{status: http.StatusRequestEntityTooLarge, msg: fmt.Sprintf(format, args...)}
}

// decodeJSON decodes exactly one JSON value from r into v, rejecting unknown
// fields and trailing data. An empty body decodes as the zero value when
// allowEmpty is set: POST .../receive with no body means all defaults.
func decodeJSON(r io.Reader, v any, allowEmpty bool) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var maxErr *http.MaxBytesError
		var syntaxErr *json.SyntaxError
		var typeErr *json.UnmarshalTypeError
		switch {
		case errors.As(err, &maxErr):
			return tooLarge("request body exceeds %d bytes", maxErr.Limit)
		case errors.Is(err, io.EOF):
			if allowEmpty {
				return nil
			}
			return badRequest("request body is empty; a JSON object is required")
		case errors.Is(err, io.ErrUnexpectedEOF):
			return badRequest("malformed JSON: unexpected end of body")
		case errors.As(err, &syntaxErr):
			return badRequest("malformed JSON at byte %d: %v", syntaxErr.Offset, err)
		case errors.As(err, &typeErr):
			if typeErr.Field != "" {
				return badRequest("field %q must be %s, not a JSON %s", typeErr.Field, jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
			}
			return badRequest("request body must be a JSON object, not a JSON %s", typeErr.Value)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			return badRequest("unknown field %s", strings.TrimPrefix(err.Error(), "json: unknown field "))
		default:
			return badRequest("malformed JSON: %v", err)
		}
	}
	// Exactly one value: "{} {}" or "{}x" is a malformed body, not a request.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return tooLarge("request body exceeds %d bytes", maxErr.Limit)
		}
		return badRequest("malformed JSON: unexpected data after the request object")
	}
	return nil
}

func jsonKind(goKind string) string {
	switch goKind {
	case "string":
		return "a string"
	case "slice":
		return "an array"
	case "struct", "map":
		return "an object"
	case "ptr":
		return "a string"
	default:
		return "a number"
	}
}

// validName reports whether s is a valid topic name or message id: 1 to
// MaxNameLen letters, digits, '-', '_' or '.'. The set keeps names safe in
// URL paths, file names, metric labels and Redis keys alike.
func validName(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9', c == '-', c == '_', c == '.':
		default:
			return false
		}
	}
	return true
}

func checkTopic(topic string) error {
	if !validName(topic) {
		return badRequest("invalid topic %q: use 1 to %d letters, digits, '-', '_' or '.'", truncate(topic), MaxNameLen)
	}
	return nil
}

func checkID(field, id string) error {
	if !validName(id) {
		return badRequest("invalid %s %q: use 1 to %d letters, digits, '-', '_' or '.'", field, truncate(id), MaxNameLen)
	}
	return nil
}

// truncate shortens s for an error message so a megabyte of garbage is not
// echoed back.
func truncate(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	return s[:max] + "..."
}

// parseDuration parses a non-negative Go duration string ("1.5s", "10m").
func parseDuration(field, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, badRequest("field %q: invalid duration %q (use a Go duration such as \"250ms\", \"10s\" or \"1h30m\")", field, truncate(s))
	}
	if d < 0 {
		return 0, badRequest("field %q: duration %q is negative", field, s)
	}
	return d, nil
}

// A message is a validated put: what the store is asked to keep.
type message struct {
	ID        string
	Payload   []byte
	DeliverAt time.Time
}

// toMessage validates p and resolves its due time against now. Neither delay
// nor deliver_at means due now; a deliver_at in the past is due now too.
func (p *putRequest) toMessage(now time.Time, maxPayload int64) (message, error) {
	m := message{ID: p.ID, DeliverAt: now}
	if p.ID != "" {
		if err := checkID("id", p.ID); err != nil {
			return message{}, err
		}
	}
	switch {
	case p.Delay != nil && p.DeliverAt != nil:
		return message{}, badRequest("give either \"delay\" or \"deliver_at\", not both")
	case p.Delay != nil:
		d, err := parseDuration("delay", *p.Delay)
		if err != nil {
			return message{}, err
		}
		m.DeliverAt = now.Add(d)
	case p.DeliverAt != nil:
		t, err := time.Parse(time.RFC3339Nano, *p.DeliverAt)
		if err != nil {
			return message{}, badRequest("field \"deliver_at\": invalid time %q (use RFC 3339, such as \"2030-01-02T15:04:05Z\")", truncate(*p.DeliverAt))
		}
		if t.Year() > 9999 || t.Year() < 1 {
			return message{}, badRequest("field \"deliver_at\": year %d is out of range", t.Year())
		}
		m.DeliverAt = t
	}
	if len(p.Payload) > 0 {
		if int64(len(p.Payload)) > maxPayload {
			return message{}, tooLarge("payload is %d bytes; the limit is %d", len(p.Payload), maxPayload)
		}
		// The decoder has checked the payload is JSON. Compact it so the
		// stored bytes do not depend on the sender's whitespace, but only
		// when there is any: compacting costs a scan and a copy.
		payload := []byte(p.Payload)
		if bytes.ContainsAny(payload, " \t\r\n") {
			var buf bytes.Buffer
			if err := json.Compact(&buf, payload); err != nil {
				return message{}, badRequest("field \"payload\": %v", err)
			}
			payload = buf.Bytes()
		}
		if string(payload) != "null" {
			m.Payload = payload
		}
	}
	return m, nil
}

// A receiveParams is a validated receive request.
type receiveParams struct {
	Max        int
	Wait       time.Duration
	Visibility time.Duration
}

// Limits bounds what one request may ask for. The zero value of a field
// means its default.
type Limits struct {
	// MaxPayload is the largest payload of one message, in bytes of compact
	// JSON (default 1 MiB). A larger one is refused with 413.
	MaxPayload int64
	// MaxBatch is the most messages one batch may hold (default 10000).
	MaxBatch int
	// MaxReceive is the most messages one receive may return (default 1000).
	MaxReceive int
	// MaxWait is the longest long poll a receive may ask for (default 20s).
	MaxWait time.Duration
	// MaxVisibility is the longest lease a receive may ask for (default 12h).
	MaxVisibility time.Duration
	// DefaultVisibility is the lease when a receive names none (default 30s).
	DefaultVisibility time.Duration
}

func (l Limits) withDefaults() Limits {
	if l.MaxPayload <= 0 {
		l.MaxPayload = 1 << 20
	}
	if l.MaxBatch <= 0 {
		l.MaxBatch = 10000
	}
	if l.MaxReceive <= 0 {
		l.MaxReceive = 1000
	}
	if l.MaxWait <= 0 {
		l.MaxWait = 20 * time.Second
	}
	if l.MaxVisibility <= 0 {
		l.MaxVisibility = 12 * time.Hour
	}
	if l.DefaultVisibility <= 0 {
		l.DefaultVisibility = 30 * time.Second
	}
	return l
}

// bodyLimit is the largest request body a single put may send: the payload
// plus room for the other fields and whitespace.
func (l Limits) bodyLimit() int64 { return l.MaxPayload + 64<<10 }

// batchBodyLimit bounds a batch body; each message is still held to
// MaxPayload on its own.
func (l Limits) batchBodyLimit() int64 {
	const max = 256 << 20
	if n := l.MaxPayload * 16; n < max {
		return n + 64<<10
	}
	return max
}

func (q *receiveRequest) params(l Limits) (receiveParams, error) {
	p := receiveParams{Max: 10, Visibility: l.DefaultVisibility}
	if q.Max != nil {
		if *q.Max < 1 || *q.Max > l.MaxReceive {
			return p, badRequest("field \"max\": %d is out of range 1 to %d", *q.Max, l.MaxReceive)
		}
		p.Max = *q.Max
	}
	if q.Wait != nil {
		d, err := parseDuration("wait", *q.Wait)
		if err != nil {
			return p, err
		}
		if d > l.MaxWait {
			return p, badRequest("field \"wait\": %v exceeds the limit of %v", d, l.MaxWait)
		}
		p.Wait = d
	}
	if q.Visibility != nil {
		d, err := parseDuration("visibility", *q.Visibility)
		if err != nil {
			return p, err
		}
		if d <= 0 || d > l.MaxVisibility {
			return p, badRequest("field \"visibility\": %v is out of range (0s, %v]", d, l.MaxVisibility)
		}
		p.Visibility = d
	}
	return p, nil
}
