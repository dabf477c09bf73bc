package api

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"
)

func ptr(s string) *string { return &s }

var appendCases = []PutRequest{
	{},
	{ID: "order-7"},
	{Payload: json.RawMessage(`{"n":1}`)},
	{Payload: json.RawMessage(`"a \"quoted\" <string>"`), Delay: ptr("1h30m")},
	{ID: "x", Payload: json.RawMessage(`[1,2,3]`), DeliverAt: ptr("2030-01-02T15:04:05.123456789Z")},
	{ID: "é\"\\<>&\x00\n", Delay: ptr(""), DeliverAt: ptr("")},
	{ID: "\xff", Payload: json.RawMessage(`null`)},
	{ID: "h", Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}},
	{Payload: json.RawMessage(`1`), Headers: map[string]string{"b": "<&>", "a": "é\"\\", "c": "", "\xff": "\x00\n"}},
	{Headers: map[string]string{}},
}

// htmlEscaped returns b as encoding/json would write it: with <, > and &
// escaped inside strings, which AppendJSON leaves in payloads as they are.
func htmlEscaped(b []byte) []byte {
	var out bytes.Buffer
	json.HTMLEscape(&out, b)
	return out.Bytes()
}

// TestAppendJSONIsEncodingJSON checks that the hand-written encoder writes
// what encoding/json writes for every request, byte for byte but for the
// HTML escaping encoding/json adds inside payloads, so that the wire has
// one definition: the types' tags.
func TestAppendJSONIsEncodingJSON(t *testing.T) {
	for _, r := range appendCases {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if got := r.AppendJSON(nil); !bytes.Equal(htmlEscaped(got), want) {
			t.Errorf("AppendJSON(%+v) = %s; encoding/json writes %s", r, got, want)
		}
	}
	b := BatchRequest{Messages: appendCases}
	want, _ := json.Marshal(b)
	if got := b.AppendJSON([]byte("prefix")); !bytes.Equal(htmlEscaped(got), append([]byte("prefix"), want...)) {
		t.Errorf("BatchRequest.AppendJSON = %s; encoding/json writes %s", got, want)
	}
	if got, want := (&BatchRequest{}).AppendJSON(nil), `{"messages":[]}`; string(got) != want {
		// encoding/json writes a nil slice as null; the server refuses an empty batch either way.
		t.Errorf("empty batch: %s; want %s", got, want)
	}
}

// FuzzAppendJSON checks the encoder against encoding/json on arbitrary
// strings and compact JSON payloads.
func FuzzAppendJSON(f *testing.F) {
	for _, r := range appendCases {
		d, a := "", ""
		if r.Delay != nil {
			d = *r.Delay
		}
		if r.DeliverAt != nil {
			a = *r.DeliverAt
		}
		f.Add(r.ID, string(r.Payload), d, a)
	}
	f.Fuzz(func(t *testing.T, id, payload, delay, at string) {
		r := PutRequest{ID: id, Delay: &delay, DeliverAt: &at, Headers: map[string]string{delay: at, id: payload}}
		var compact bytes.Buffer
		if json.Compact(&compact, []byte(payload)) == nil {
			r.Payload = compact.Bytes()
		}
		want, err := json.Marshal(r)
		if err != nil {
			t.Skip() // a payload encoding/json would not take either
		}
		if got := r.AppendJSON(nil); !bytes.Equal(htmlEscaped(got), want) {
			t.Fatalf("AppendJSON = %s; encoding/json writes %s", got, want)
		}
	})
}

// BenchmarkBatchJSON encodes a batch of 1,000 messages of 86-byte payloads
// with AppendJSON beside encoding/json, the anchor, which checks and
// compacts every payload again: the reason AppendJSON exists.
//
//	go test ./api -run '^$' -bench BatchJSON -benchmem -count 6
func BenchmarkBatchJSON(b *testing.B) {
	payload := json.RawMessage(`{"user":12345,"event":"reminder","note":"0123456789abcdef0123456789abcdef0123456789"}`)
	batch := BatchRequest{Messages: make([]PutRequest, 1000)}
	for i := range batch.Messages {
		batch.Messages[i] = PutRequest{Payload: payload, Delay: ptr("1h0m0s")}
	}
	b.Run("AppendJSON", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			batch.AppendJSON(make([]byte, 0, 128*len(batch.Messages)))
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := json.Marshal(batch); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// TestResponseAppendJSONIsEncodingJSON checks the answers' encoders as
// TestAppendJSONIsEncodingJSON checks the requests'.
func TestResponseAppendJSONIsEncodingJSON(t *testing.T) {
	at := time.Date(2030, 1, 2, 15, 4, 5, 123456789, time.UTC)
	zoned := time.Date(2030, 1, 2, 15, 4, 5, 0, time.FixedZone("", -7*3600))
	for _, v := range []interface{ AppendJSON([]byte) []byte }{
		&PutResponse{},
		&PutResponse{ID: "order-7", DeliverAt: at},
		&PutResponse{ID: "é\"<>", DeliverAt: zoned},
		&BatchResponse{},
		&BatchResponse{IDs: []string{}, DeliverAt: []time.Time{}},
		&BatchResponse{IDs: []string{"a", "b\\"}, DeliverAt: []time.Time{at, zoned}},
		&ReceiveResponse{},
		&ReceiveResponse{Messages: []Delivery{}},
		&ReceiveResponse{Messages: []Delivery{
			{ID: "a", Payload: json.RawMessage(`{"n":[1,"<b>"]}`), DeliverAt: at, Receipt: "r1", Attempt: 1},
			{ID: "b\n", DeliverAt: zoned, Receipt: "", Attempt: 12},
			{Payload: json.RawMessage(`null`), Attempt: -1},
		}},
	} {
		want, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if got := v.AppendJSON(nil); !bytes.Equal(htmlEscaped(got), want) {
			t.Errorf("%T.AppendJSON = %s; encoding/json writes %s", v, got, want)
		}
	}
}
