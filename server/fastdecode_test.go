package server

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"

	"github.com/tockwheel/tock/api"
)

func strp(s string) *string { return &s }

// sentBodies are bodies as clients send them, which decodeFast must read itself.
func sentBodies() []struct {
	body []byte
	v    func() any
} {
	puts := []api.PutRequest{
		{},
		{ID: "order-7", Payload: json.RawMessage(`{"to":"ada@example.com","n":[1,2.5e3,true,null]}`), Delay: strp("1h30m")},
		{Payload: json.RawMessage(`"` + strings.Repeat("x", 98) + `"`), DeliverAt: strp("2030-01-02T15:04:05.123456789Z")},
		{Payload: json.RawMessage(`"a \"quoted\" <string> \u00e9"`)},
		{ID: "remind-ada", Payload: json.RawMessage(`1`), Delay: strp("30m"), Replace: true},
		{ID: "h", Headers: map[string]string{"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "lang": "é", "empty": ""}},
	}
	var out []struct {
		body []byte
		v    func() any
	}
	for i := range puts {
		out = append(out, struct {
			body []byte
			v    func() any
		}{puts[i].AppendJSON(nil), func() any { return new(api.PutRequest) }})
	}
	b := api.BatchRequest{Messages: puts}
	out = append(out, struct {
		body []byte
		v    func() any
	}{b.AppendJSON(nil), func() any { return new(api.BatchRequest) }})
	ack, _ := json.Marshal(api.AckRequest{Receipts: []string{"000000010000007a1c765278caf9b347", "x"}})
	out = append(out, struct {
		body []byte
		v    func() any
	}{ack, func() any { return new(api.AckRequest) }})
	max := 100
	for _, rr := range []api.ReceiveRequest{{}, {Max: &max, Wait: strp("2s"), Visibility: strp("1m0s")}} {
		b, _ := json.Marshal(rr)
		out = append(out, struct {
			body []byte
			v    func() any
		}{b, func() any { return new(api.ReceiveRequest) }})
	}
	return out
}

// TestDecodeFastReadsWhatClientsSend checks that the bodies package api's encoders write, and
// curl-style ones with whitespace, take the fast path, and decode as encoding/json decodes them.
func TestDecodeFastReadsWhatClientsSend(t *testing.T) {
	bodies := sentBodies()
	for _, s := range []string{
		`{ "payload" : { "to" : "ada@example.com" } , "delay" : "10s" }`,
		"{\"messages\": [\n  {\"payload\": 1},\n  {\"id\": \"invoice-7\", \"payload\": 2}\n]}\n",
		`{"messages":[]}`,
		`{"receipts":[]}`,
		`{"id":"a","replace": false}`,
		`{"replace" :true,"id":"a"}`,
	} {
		v := func() any { return new(api.PutRequest) }
		switch {
		case strings.Contains(s, "messages"):
			v = func() any { return new(api.BatchRequest) }
		case strings.Contains(s, "receipts"):
			v = func() any { return new(api.AckRequest) }
		}
		bodies = append(bodies, struct {
			body []byte
			v    func() any
		}{[]byte(s), v})
	}
	for _, b := range bodies {
		fast := b.v()
		if !decodeFast(b.body, fast) {
			t.Errorf("decodeFast(%s) = false; want it read on the fast path", b.body)
			continue
		}
		slow := b.v()
		if err := decodeJSON(bytes.NewReader(b.body), slow, false); err != nil {
			t.Fatalf("decodeJSON(%s): %v", b.body, err)
		}
		if !reflect.DeepEqual(fast, slow) {
			t.Errorf("decodeFast(%s) = %+v; decodeJSON gives %+v", b.body, fast, slow)
		}
	}
}

// TestDecodeFastLeavesTheRest checks bodies that decodeFast must leave to decodeJSON: those that
// are malformed, and valid ones it does not read as encoding/json would (keys in another case,
// repeated keys, escapes, nulls, numbers where strings go).
func TestDecodeFastLeavesTheRest(t *testing.T) {
	var bodies []string
	for _, tc := range putCases {
		if decodeJSON(strings.NewReader(tc.body), new(api.PutRequest), false) != nil {
			bodies = append(bodies, tc.body) // malformed, not merely invalid
		}
	}
	bodies = append(bodies,
		`{"ID":"a"}`, `{"id":"a","id":"b"}`, `{"id":"a\u0062"}`, `{"id":null}`, `{"delay":null}`,
		`{"delay":10}`, `{"replace":null}`, `{"replace":"true"}`, `{"replace":1}`, `{"replace":tru}`,
		`{"replace":truex}`, `{"replace":true,"replace":false}`, `{"messages":null}`, `{"messages":[{"payload":1},]}`, `{"messages":[1]}`,
		`{"receipts":["a",null]}`, `{"receipts":"a"}`, "{\"id\":\"\xff\"}", `{"payload":01}`,
		`{"payload":`+strings.Repeat("[", 100)+strings.Repeat("]", 100)+`}`,
		`{"max":1.5}`, `{"max":"10"}`, `{"max":null}`, `{"wait":2}`, `{"max":99999999999999999999}`,
		`{"headers":{"k":"a","k":"b"}}`, `{"headers":{"k":1}}`, `{"headers":null}`, `{"headers":{"k":"a\u0062"}}`,
		`{"headers":["k"]}`, `{"headers":{"k":"a"},"headers":{}}`,
	)
	for _, body := range bodies {
		for _, v := range []any{new(api.PutRequest), new(api.BatchRequest), new(api.AckRequest), new(api.ReceiveRequest)} {
			if decodeFast([]byte(body), v) {
				t.Errorf("decodeFast(%s) into %T = true; want it left to decodeJSON", body, v)
			}
			if !reflect.ValueOf(v).Elem().IsZero() {
				t.Errorf("decodeFast(%s) changed the %T it turned down", body, v)
			}
		}
	}
}

// FuzzDecodeFast checks decodeFast against decodeJSON on arbitrary bodies: a body it reads,
// decodeJSON reads without error, into the same request.
func FuzzDecodeFast(f *testing.F) {
	for _, b := range sentBodies() {
		f.Add(b.body)
	}
	for _, tc := range putCases {
		f.Add([]byte(tc.body))
	}
	f.Add([]byte(`{"messages":[{"id":"a","payload":[1,{"b":"c"}]},{"delay":"1s"}]}`))
	f.Add([]byte(`{"receipts":["a","b"]}`))
	f.Add([]byte(`{"max":100,"wait":"2s","visibility":"1m0s"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, mk := range []func() any{
			func() any { return new(api.PutRequest) },
			func() any { return new(api.BatchRequest) },
			func() any { return new(api.AckRequest) },
			func() any { return new(api.ReceiveRequest) },
		} {
			fast := mk()
			if !decodeFast(body, fast) {
				continue
			}
			slow := mk()
			if err := decodeJSON(bytes.NewReader(body), slow, false); err != nil {
				t.Fatalf("decodeFast(%q) read %+v; decodeJSON fails: %v", body, fast, err)
			}
			if !reflect.DeepEqual(fast, slow) {
				t.Fatalf("decodeFast(%q) = %+v; decodeJSON gives %+v", body, fast, slow)
			}
		}
	})
}

// chunks is a body that arrives in pieces, then ends if end is set, or else blocks: a Read
// after the last piece fails the test, as a Read that would wait for a client that sends no
// more.
type chunks struct {
	t      *testing.T
	pieces []string
	end    bool
}

func (c *chunks) Read(p []byte) (int, error) {
	if len(c.pieces) == 0 && c.end {
		return 0, io.EOF
	}
	if len(c.pieces) == 0 {
		c.t.Fatal("read past what the client sent: the server waits for the rest of a body it could refuse")
	}
	n := copy(p, c.pieces[0])
	if n < len(c.pieces[0]) {
		c.pieces[0] = c.pieces[0][n:]
	} else {
		c.pieces = c.pieces[1:]
	}
	return n, nil
}

// TestReadBodyRefusesWhatCannotBeJSON checks that readBody stops at a body that cannot be JSON
// without waiting for the rest, and reads one that can to its end.
func TestReadBodyRefusesWhatCannotBeJSON(t *testing.T) {
	data, err := readBody(&chunks{t: t, pieces: []string{`{"payload":x`}}, 1000)
	if err != errNotJSON || string(data) != `{"payload":x` {
		t.Fatalf("readBody of a malformed start: %q, %v; want it and errNotJSON at once", data, err)
	}
	// Checked again once as much again has arrived.
	data, err = readBody(&chunks{t: t, pieces: []string{`{"payload":`, `"abcdef" xyz`}}, 1000)
	if err != errNotJSON {
		t.Fatalf("readBody with a bad byte in the second piece: %q, %v; want errNotJSON", data, err)
	}
	body := `{"payload":"abc","delay":"1s"}`
	data, err = readBody(&chunks{t: t, pieces: []string{body[:5], body[5:12], body[12:]}, end: true}, int64(len(body)))
	if err != nil || string(data) != body {
		t.Fatalf("readBody of a good body in pieces: %q, %v", data, err)
	}
}
