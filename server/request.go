package server

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/queue"
)

// MaxNameLen is the longest topic name or message id the API accepts.
const MaxNameLen = 128

// errBodyTimeout is decodeJSON's error for a body whose read deadline
// passed.
var errBodyTimeout = &requestError{status: http.StatusRequestTimeout, msg: "the request body did not arrive in time"}

// decodeBody decodes r's body, of at most limit bytes, into v as decodeJSON
// does, within the BodyTimeout from now: a client that sends its body a
// byte now and then does not hold the connection and a goroutine for long.
// The deadline is lifted once the body is read, so that it does not cut a
// long poll's wait or the answer short.
func (s *Server) decodeBody(w http.ResponseWriter, r *http.Request, limit int64, v any, allowEmpty bool) error {
	body := http.MaxBytesReader(w, r.Body, limit)
	if r.ContentLength == 0 {
		return decodeJSON(body, v, allowEmpty)
	}
	rc := http.NewResponseController(w)
	// An error means a writer without deadlines, such as a test recorder.
	timed := rc.SetReadDeadline(time.Now().Add(s.limits.BodyTimeout)) == nil
	var err error
	if n := r.ContentLength; n > 0 && n <= limit {
		// A body of a known length is read whole, and decoded by hand when
		// it can be (see decodeFast); otherwise decodeJSON reads the same
		// bytes, and the error that stopped the reading, as it would have
		// read them from the body.
		data, rerr := readBody(body, n)
		switch {
		case rerr == nil && decodeFast(data, v):
		case rerr == nil:
			err = decodeJSON(bytes.NewReader(data), v, allowEmpty)
		case rerr == errLongerThanSaid || rerr == errNotJSON:
			err = decodeJSON(io.MultiReader(bytes.NewReader(data), body), v, allowEmpty)
		default:
			err = decodeJSON(io.MultiReader(bytes.NewReader(data), failingReader{rerr}), v, allowEmpty)
		}
	} else {
		err = decodeJSON(body, v, allowEmpty)
	}
	if timed {
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err == errBodyTimeout {
		w.Header().Set("Connection", "close")
		return &requestError{status: http.StatusRequestTimeout, msg: fmt.Sprintf(
			"the request body did not arrive within %v; send it at once", s.limits.BodyTimeout)}
	}
	return err
}

// failingReader is a reader that fails with err.
type failingReader struct{ err error }

func (r failingReader) Read([]byte) (int, error) { return 0, r.err }

// decodeJSON decodes exactly one JSON value from r into v, one of the
// request types of package api, rejecting unknown fields (so that a
// misspelt "delay" is an error, not a message due now) and trailing data. An empty body decodes as the zero value when
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
		case errors.Is(err, os.ErrDeadlineExceeded):
			return errBodyTimeout
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
			if f := typeErr.Field; (f == "headers" || strings.HasSuffix(f, ".headers")) && typeErr.Type.Kind().String() == "string" {
				return badRequest("field %q must be an object of strings, not one holding a JSON %s", f, typeErr.Value)
			}
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
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return errBodyTimeout
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
// MaxNameLen letters, digits, '-', '_' or '.', but not "." or "..". The set
// keeps names safe in URL paths, file names, metric labels and Redis keys
// alike; "." and ".." would be path segments, which clients and proxies
// remove from URLs.
func validName(s string) bool {
	if len(s) == 0 || len(s) > MaxNameLen || s == "." || s == ".." {
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
		return badRequest("invalid topic %q: use 1 to %d letters, digits, '-', '_' or '.', other than \".\" and \"..\"", truncate(topic), MaxNameLen)
	}
	return nil
}

func checkID(field, id string) error {
	if !validName(id) && !isFireID(id) {
		return badRequest("invalid %s %q: use 1 to %d letters, digits, '-', '_' or '.', other than \".\" and \"..\"", field, truncate(id), MaxNameLen)
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

// A message is a validated put: what the engine is asked to keep.
type message struct {
	ID        string
	Payload   []byte
	Headers   map[string]string
	DeliverAt time.Time
}

// toMessage validates p and resolves its due time against now: neither
// delay nor deliver_at means now, and so does a deliver_at in the past, so
// that the due time is always the later of the one asked for and now. That
// is the time the API echoes, the engine keeps and lateness counts from.
// The latest due time accepted is [queue.MaxDeliverAt].
func toMessage(p *api.PutRequest, now time.Time, maxPayload int64) (message, error) {
	maxDeliverAt := queue.MaxDeliverAt()
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
		if d > maxDeliverAt.Sub(now) {
			return message{}, badRequest("field \"delay\": %v from now is after %s, the latest due time accepted",
				d, maxDeliverAt.Format(time.RFC3339))
		}
		m.DeliverAt = now.Add(d)
	case p.DeliverAt != nil:
		t, err := time.Parse(api.TimeFormat, *p.DeliverAt)
		if err != nil {
			return message{}, badRequest("field \"deliver_at\": invalid time %q (use RFC 3339, such as \"2030-01-02T15:04:05Z\")", truncate(*p.DeliverAt))
		}
		if t.After(maxDeliverAt) {
			return message{}, badRequest("field \"deliver_at\": %s is after %s, the latest due time accepted",
				truncate(*p.DeliverAt), maxDeliverAt.Format(time.RFC3339))
		}
		if t.After(now) {
			m.DeliverAt = t
		}
	}
	if len(p.Payload) > 0 {
		// The decoder has checked the payload is JSON. Compact it, so that
		// the stored bytes and the limit do not depend on the sender's
		// whitespace, but only when there is any: compacting costs a scan
		// and a copy. The body limit leaves room for the whitespace.
		payload := []byte(p.Payload)
		if bytes.ContainsAny(payload, " \t\r\n") {
			var buf bytes.Buffer
			if err := json.Compact(&buf, payload); err != nil {
				return message{}, badRequest("field \"payload\": %v", err)
			}
			payload = buf.Bytes()
		}
		if int64(len(payload)) > maxPayload {
			return message{}, tooLarge("payload is %d bytes of compact JSON; the limit is %d", len(payload), maxPayload)
		}
		if string(payload) != "null" {
			m.Payload = payload
		}
	}
	if len(p.Headers) > 0 {
		if err := queue.CheckHeaders(p.Headers); err != nil {
			if errors.Is(err, queue.ErrTooLarge) {
				return message{}, tooLarge("field \"headers\": %v", err)
			}
			return message{}, badRequest("field \"headers\": %v", err)
		}
		if n := int64(len(m.Payload) + queue.HeadersSize(p.Headers)); n > maxPayload {
			return message{}, tooLarge("payload and headers are %d bytes (the payload as compact JSON, the headers' keys and values); the limit is %d", n, maxPayload)
		}
		m.Headers = p.Headers
	}
	return m, nil
}

// A receiveParams is a validated receive request.
type receiveParams struct {
	Max        int
	Wait       time.Duration
	Visibility time.Duration
}

func receiveParamsOf(q *api.ReceiveRequest, l Limits) (receiveParams, error) {
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
