package client

import (
	"bytes"
	"encoding/json"
	"io"
	"time"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/internal/wirejson"
)

// The answers that carry messages (a receive's deliveries, a put's and a batch's IDs) are decoded
// by hand when they are in the form the server writes them (package api's AppendJSON):
// encoding/json's reflection and its second pass over every payload cost more than the rest of a
// receive. Anything else, such as an answer with a field this client does not know, is decoded
// by encoding/json, as before.

// readAnswer reads the body of an answer whose Content-Length is n (-1 if unknown).
func readAnswer(body io.Reader, n int64) ([]byte, error) {
	if n < 0 || n > 64<<20 {
		return io.ReadAll(body)
	}
	buf := make([]byte, 0, n+1) // one more: the last read finds the end
	for {
		m, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+m]
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return buf, err
		}
		if len(buf) == cap(buf) {
			rest, err := io.ReadAll(body)
			return append(buf, rest...), err
		}
	}
}

// decodeAnswer decodes the JSON answer data into out, as json.Decoder's Decode would.
func decodeAnswer(data []byte, out any) error {
	r := wirejson.NewReader(data)
	switch out := out.(type) {
	case *api.ReceiveResponse:
		var v api.ReceiveResponse
		if fastReceive(&r, &v) && r.End() {
			*out = v
			return nil
		}
	case *api.PutResponse:
		var v api.PutResponse
		if fastPutResponse(&r, &v) && r.End() {
			*out = v
			return nil
		}
	case *api.BatchResponse:
		var v api.BatchResponse
		if fastBatchResponse(&r, &v) && r.End() {
			*out = v
			return nil
		}
	}
	return json.NewDecoder(bytes.NewReader(data)).Decode(out)
}

// timeOf reads a time as encoding/json reads a time.Time.
func timeOf(r *wirejson.Reader, t *time.Time) bool {
	s, ok := r.String()
	return ok && t.UnmarshalText(s) == nil
}

func fastReceive(r *wirejson.Reader, v *api.ReceiveResponse) bool {
	return r.Object(func(key []byte) int {
		if string(key) != "messages" {
			return -1
		}
		v.Messages = []api.Delivery{}
		return wirejson.Field(r.Array(func() bool {
			var d api.Delivery
			if !fastDelivery(r, &d) {
				return false
			}
			v.Messages = append(v.Messages, d)
			return true
		}), 0)
	})
}

func fastDelivery(r *wirejson.Reader, d *api.Delivery) bool {
	return r.Object(func(key []byte) int {
		switch string(key) {
		case "id":
			s, ok := r.String()
			d.ID = string(s)
			return wirejson.Field(ok, 0)
		case "payload":
			raw, _, ok := r.Value()
			d.Payload = bytes.Clone(raw) // as encoding/json copies it, not to keep the whole answer
			return wirejson.Field(ok, 1)
		case "deliver_at":
			return wirejson.Field(timeOf(r, &d.DeliverAt), 2)
		case "receipt":
			s, ok := r.String()
			d.Receipt = string(s)
			return wirejson.Field(ok, 3)
		case "attempt":
			n, ok := r.Int()
			d.Attempt = n
			return wirejson.Field(ok, 4)
		case "headers":
			h, ok := r.StringMap()
			d.Headers = h
			return wirejson.Field(ok, 5)
		}
		return -1
	})
}

func fastPutResponse(r *wirejson.Reader, v *api.PutResponse) bool {
	return r.Object(func(key []byte) int {
		switch string(key) {
		case "id":
			s, ok := r.String()
			v.ID = string(s)
			return wirejson.Field(ok, 0)
		case "deliver_at":
			return wirejson.Field(timeOf(r, &v.DeliverAt), 1)
		}
		return -1
	})
}

func fastBatchResponse(r *wirejson.Reader, v *api.BatchResponse) bool {
	return r.Object(func(key []byte) int {
		switch string(key) {
		case "ids":
			v.IDs = []string{}
			return wirejson.Field(r.Array(func() bool {
				s, ok := r.String()
				v.IDs = append(v.IDs, string(s))
				return ok
			}), 0)
		case "deliver_at":
			v.DeliverAt = []time.Time{}
			return wirejson.Field(r.Array(func() bool {
				var t time.Time
				ok := timeOf(r, &t)
				v.DeliverAt = append(v.DeliverAt, t)
				return ok
			}), 1)
		}
		return -1
	})
}
