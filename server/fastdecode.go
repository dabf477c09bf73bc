package server

import (
	"errors"
	"io"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/internal/wirejson"
)

// The bodies of puts, batches, acks and receives, the requests that carry messages and receipts
// or fetch them, are decoded by hand when they are in the form clients send (package api's
// AppendJSON writes it): encoding/json scans a body three times and reflects on every field,
// which cost more per message than the rest of a batch put. Anything else, every malformed body
// among it, is decoded again by decodeJSON, so that its errors are the same as ever.

// readBody reads a request body whose Content-Length is n, to its end. It returns what it read
// and the error that stopped it, if any: errNotJSON as soon as what it read cannot begin a JSON
// document, so that a body the server refuses is refused before the rest arrives (decodeJSON,
// reading the same bytes, then fails at once at the same byte). While the body arrives, what it
// has read is checked each time it has doubled since the last check, so that the checks cost at
// most twice the body: a bad byte in a body sent slowly is noticed by the time as much again has
// arrived, or at the end of the body, or at the body timeout.
func readBody(body io.Reader, n int64) ([]byte, error) {
	buf := make([]byte, 0, n+1) // one more: the last read finds the end
	checked := 0
	for {
		m, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		switch {
		case err == io.EOF:
			return buf, nil
		case err != nil:
			return buf, err
		case len(buf) == cap(buf):
			return buf, errLongerThanSaid
		case int64(len(buf)) < n && len(buf) >= 2*checked:
			if !wirejson.Prefix(buf) {
				return buf, errNotJSON
			}
			checked = len(buf)
		}
	}
}

// readBody's errors that leave the rest of the body to decodeJSON: errLongerThanSaid for a body
// longer than its Content-Length (which net/http does not let happen), errNotJSON for one that
// cannot be JSON.
var (
	errLongerThanSaid = errors.New("request body longer than its Content-Length")
	errNotJSON        = errors.New("request body is not JSON")
)

// decodeFast decodes data into v, a request of package api, if it is in a form decodeFast reads,
// and reports whether it was. A false return leaves v as it found it, for decodeJSON.
func decodeFast(data []byte, v any) bool {
	r := wirejson.NewReader(data)
	switch v := v.(type) {
	case *api.PutRequest:
		var p api.PutRequest
		if fastPut(&r, &p) && r.End() {
			*v = p
			return true
		}
	case *api.BatchRequest:
		var b api.BatchRequest
		if fastBatch(&r, &b) && r.End() {
			*v = b
			return true
		}
	case *api.AckRequest:
		var a api.AckRequest
		if fastAck(&r, &a) && r.End() {
			*v = a
			return true
		}
	case *api.ReceiveRequest:
		var q api.ReceiveRequest
		if fastReceive(&r, &q) && r.End() {
			*v = q
			return true
		}
	}
	return false
}

// fastPut reads a put request. Its payload aliases the Reader's data: engines do not keep the
// bytes they are given (delayq copies those it keeps in memory).
func fastPut(r *wirejson.Reader, p *api.PutRequest) bool {
	return r.Object(func(key []byte) int {
		switch string(key) {
		case "id":
			s, ok := r.String()
			p.ID = string(s)
			return wirejson.Field(ok, 0)
		case "payload":
			raw, _, ok := r.Value()
			p.Payload = raw
			return wirejson.Field(ok, 1)
		case "delay":
			s, ok := r.String()
			p.Delay = ptr(string(s))
			return wirejson.Field(ok, 2)
		case "deliver_at":
			s, ok := r.String()
			p.DeliverAt = ptr(string(s))
			return wirejson.Field(ok, 3)
		case "replace":
			v, ok := r.Bool()
			p.Replace = v
			return wirejson.Field(ok, 4)
		case "headers":
			h, ok := r.StringMap()
			p.Headers = h
			return wirejson.Field(ok, 5)
		}
		return -1
	})
}

func fastBatch(r *wirejson.Reader, b *api.BatchRequest) bool {
	return r.Object(func(key []byte) int {
		if string(key) != "messages" {
			return -1
		}
		b.Messages = []api.PutRequest{}
		return wirejson.Field(r.Array(func() bool {
			var p api.PutRequest
			ok := fastPut(r, &p)
			b.Messages = append(b.Messages, p)
			return ok
		}), 0)
	})
}

func fastAck(r *wirejson.Reader, a *api.AckRequest) bool {
	return r.Object(func(key []byte) int {
		if string(key) != "receipts" {
			return -1
		}
		a.Receipts = []string{}
		return wirejson.Field(r.Array(func() bool {
			s, ok := r.String()
			a.Receipts = append(a.Receipts, string(s))
			return ok
		}), 0)
	})
}

func fastReceive(r *wirejson.Reader, q *api.ReceiveRequest) bool {
	return r.Object(func(key []byte) int {
		switch string(key) {
		case "max":
			n, ok := r.Int()
			q.Max = ptr(n)
			return wirejson.Field(ok, 0)
		case "wait":
			s, ok := r.String()
			q.Wait = ptr(string(s))
			return wirejson.Field(ok, 1)
		case "visibility":
			s, ok := r.String()
			q.Visibility = ptr(string(s))
			return wirejson.Field(ok, 2)
		}
		return -1
	})
}

func ptr[T any](v T) *T { return &v }
