package client

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/internal/wirejson"
)

// An answer is an answer as the server writes it, which the fast path must read, and its type.
type answer struct {
	data []byte
	mk   func() any
}

func answers() []answer {
	at := time.Date(2030, 1, 2, 15, 4, 5, 123456789, time.UTC)
	rr := api.ReceiveResponse{Messages: []api.Delivery{
		{ID: "a", Payload: json.RawMessage(`{"n":[1,"<b>",{"c":null}]}`), DeliverAt: at, Receipt: "000000010000007a1c765278caf9b347", Attempt: 1},
		{ID: "b", Payload: json.RawMessage(`"é \"x\""`), DeliverAt: at.Add(time.Second), Receipt: "r", Attempt: 12},
		{ID: "c", DeliverAt: at, Receipt: "r2", Attempt: 3},
		{ID: "d", DeliverAt: at, Receipt: "r3", Attempt: 1, Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "e": ""}},
	}}
	empty := api.ReceiveResponse{Messages: []api.Delivery{}}
	pr := api.PutResponse{ID: "order-7", DeliverAt: at}
	br := api.BatchResponse{IDs: []string{"a", "b"}, DeliverAt: []time.Time{at, at.Add(time.Hour)}}
	return []answer{
		{rr.AppendJSON(nil), answerTypes[0]},
		{empty.AppendJSON(nil), answerTypes[0]},
		{pr.AppendJSON(nil), answerTypes[1]},
		{br.AppendJSON(nil), answerTypes[2]},
	}
}

// fastOf returns the fast reader of answer type out, for tests.
func fastOf(data []byte, out any) bool {
	r := wirejson.NewReader(data)
	switch out := out.(type) {
	case *api.ReceiveResponse:
		return fastReceive(&r, out) && r.End()
	case *api.PutResponse:
		return fastPutResponse(&r, out) && r.End()
	case *api.BatchResponse:
		return fastBatchResponse(&r, out) && r.End()
	}
	return false
}

var answerTypes = []func() any{
	func() any { return new(api.ReceiveResponse) },
	func() any { return new(api.PutResponse) },
	func() any { return new(api.BatchResponse) },
}

// TestFastAnswersAreEncodingJSON checks that the server's answers take the fast path and decode
// as encoding/json decodes them.
func TestFastAnswersAreEncodingJSON(t *testing.T) {
	for _, a := range answers() {
		data := a.data
		fast, slow := a.mk(), a.mk()
		if !fastOf(data, fast) {
			t.Errorf("%s: not read on the fast path", data)
			continue
		}
		if err := json.NewDecoder(bytes.NewReader(data)).Decode(slow); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Errorf("%s: fast %+v; encoding/json %+v", data, fast, slow)
		}
	}
	// An answer with a field this client does not know is left to encoding/json, which ignores it.
	var v api.PutResponse
	if err := decodeAnswer([]byte(`{"id":"a","deliver_at":"2030-01-02T15:04:05Z","new":1}`), &v); err != nil || v.ID != "a" {
		t.Fatalf("answer with an unknown field: %+v, %v", v, err)
	}
}

// FuzzDecodeAnswer checks the fast path against encoding/json: an answer it reads, encoding/json
// reads into the same value.
func FuzzDecodeAnswer(f *testing.F) {
	for _, a := range answers() {
		f.Add(a.data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, mk := range answerTypes {
			fast := mk()
			if !fastOf(data, fast) {
				continue
			}
			slow := mk()
			if err := json.NewDecoder(bytes.NewReader(data)).Decode(slow); err != nil {
				t.Fatalf("fast path read %q as %+v; encoding/json fails: %v", data, fast, err)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("fast path read %q as %+v; encoding/json gives %+v", data, fast, slow)
			}
		}
	})
}
