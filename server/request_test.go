package server

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/queue"
)

var testNow = time.Date(2030, 1, 2, 15, 4, 5, 0, time.UTC)

// putCases are request bodies of a single put and what they must give: the
// status of the error (0 for none), a fragment of its message, and for a
// valid body the due time and stored payload.
var putCases = []struct {
	name    string
	body    string
	status  int
	msg     string
	due     time.Time
	payload string
}{
	{"no delay is due now", `{"payload":{"a":1}}`, 0, "", testNow, `{"a":1}`},
	{"delay", `{"payload":"x","delay":"10s"}`, 0, "", testNow.Add(10 * time.Second), `"x"`},
	{"zero delay", `{"delay":"0s"}`, 0, "", testNow, ""},
	{"deliver_at", `{"deliver_at":"2030-01-02T16:00:00.5Z"}`, 0, "", time.Date(2030, 1, 2, 16, 0, 0, 5e8, time.UTC), ""},
	// A past due time is due at the put: that is the time echoed, stored and counted from.
	{"deliver_at in the past is due now", `{"deliver_at":"2001-01-01T00:00:00Z"}`, 0, "", testNow, ""},
	{"deliver_at before 1970 is due now", `{"deliver_at":"1901-01-01T00:00:00Z"}`, 0, "", testNow, ""},
	{"deliver_at in year 0 is due now", `{"deliver_at":"0000-01-01T00:00:00Z"}`, 0, "", testNow, ""},
	{"latest deliver_at", `{"deliver_at":"2262-01-01T00:00:00Z"}`, 0, "", time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC), ""},
	{"payload counted compact", `{"payload":[` + strings.Repeat(" ", 200) + `1,2,3]}`, 0, "", testNow, `[1,2,3]`},
	{"payload compacted", "{\"payload\": [1, 2,\n 3]}", 0, "", testNow, `[1,2,3]`},
	{"null payload is none", `{"payload":null}`, 0, "", testNow, ""},
	{"id", `{"id":"order-42.a_b"}`, 0, "", testNow, ""},
	{"trailing whitespace", "{}\n\t ", 0, "", testNow, ""},

	{"empty body", ``, 400, "empty", time.Time{}, ""},
	{"malformed", `{"payload":`, 400, "malformed JSON", time.Time{}, ""},
	{"not an object", `[1,2]`, 400, "JSON object", time.Time{}, ""},
	{"syntax error", `{"payload":}`, 400, "malformed JSON", time.Time{}, ""},
	{"trailing data", `{}{}`, 400, "after the request object", time.Time{}, ""},
	{"trailing garbage", `{} x`, 400, "malformed JSON", time.Time{}, ""},
	{"unknown field", `{"dealy":"10s"}`, 400, `unknown field "dealy"`, time.Time{}, ""},
	{"delay not a string", `{"delay":10}`, 400, `"delay"`, time.Time{}, ""},
	{"negative delay", `{"delay":"-1s"}`, 400, "negative", time.Time{}, ""},
	{"unparsable delay", `{"delay":"10 seconds"}`, 400, "invalid duration", time.Time{}, ""},
	{"delay without unit", `{"delay":"10"}`, 400, "invalid duration", time.Time{}, ""},
	{"overflowing delay", `{"delay":"999999999999h"}`, 400, "invalid duration", time.Time{}, ""},
	{"both delay and deliver_at", `{"delay":"1s","deliver_at":"2030-01-02T16:00:00Z"}`, 400, "not both", time.Time{}, ""},
	{"bad deliver_at", `{"deliver_at":"tomorrow"}`, 400, "RFC 3339", time.Time{}, ""},
	{"deliver_at without zone", `{"deliver_at":"2030-01-02T16:00:00"}`, 400, "RFC 3339", time.Time{}, ""},
	{"bad id", `{"id":"a/b"}`, 400, "invalid id", time.Time{}, ""},
	{"id too long", `{"id":"` + strings.Repeat("a", MaxNameLen+1) + `"}`, 400, "invalid id", time.Time{}, ""},
	{"payload over the limit", `{"payload":"` + strings.Repeat("a", 100) + `"}`, 413, "limit", time.Time{}, ""},
	{"compact payload over the limit", `{"payload": [` + strings.Repeat("1, ", 40) + `1]}`, 413, "83 bytes of compact JSON", time.Time{}, ""},
	{"deliver_at after 2262-01-01", `{"deliver_at":"2262-01-01T00:00:00.000000001Z"}`, 400, "is after 2262-01-01T00:00:00Z, the latest due time accepted", time.Time{}, ""},
	{"deliver_at in 9999", `{"deliver_at":"9999-12-31T23:59:59Z"}`, 400, "is after 2262-01-01T00:00:00Z, the latest due time accepted", time.Time{}, ""},
	{"delay past 2262", `{"delay":"2562047h"}`, 400, "is after 2262-01-01T00:00:00Z, the latest due time accepted", time.Time{}, ""},
}

const testMaxPayload = 64

func decodePut(body string, maxPayload int64) (message, error) {
	var req api.PutRequest
	r := http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(body)), maxPayload+64<<10)
	if err := decodeJSON(r, &req, false); err != nil {
		return message{}, err
	}
	return toMessage(&req, testNow, maxPayload)
}

func TestDecodePut(t *testing.T) {
	for _, tc := range putCases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := decodePut(tc.body, testMaxPayload)
			if tc.status != 0 {
				var re *requestError
				if !errors.As(err, &re) {
					t.Fatalf("error = %v, want a requestError with status %d", err, tc.status)
				}
				if re.status != tc.status || !strings.Contains(re.msg, tc.msg) {
					t.Fatalf("error = %d %q, want %d containing %q", re.status, re.msg, tc.status, tc.msg)
				}
				return
			}
			if err != nil {
				t.Fatalf("error = %v", err)
			}
			if !m.DeliverAt.Equal(tc.due) {
				t.Errorf("DeliverAt = %v, want %v", m.DeliverAt, tc.due)
			}
			if string(m.Payload) != tc.payload {
				t.Errorf("Payload = %q, want %q", m.Payload, tc.payload)
			}
		})
	}
}

func TestBodyOverLimitIs413(t *testing.T) {
	body := `{"payload":"` + strings.Repeat("a", 200<<10) + `"}`
	_, err := decodePut(body, testMaxPayload)
	var re *requestError
	if !errors.As(err, &re) || re.status != http.StatusRequestEntityTooLarge {
		t.Fatalf("error = %v, want 413", err)
	}
}

func TestValidName(t *testing.T) {
	for _, s := range []string{"a", "A-z_0.9", strings.Repeat("x", MaxNameLen)} {
		if !validName(s) {
			t.Errorf("validName(%q) = false", s)
		}
	}
	for _, s := range []string{"", strings.Repeat("x", MaxNameLen+1), "a b", "a/b", "é", "a\x00", "a:b", "a%2Fb"} {
		if validName(s) {
			t.Errorf("validName(%q) = true", s)
		}
	}
}

func TestReceiveParams(t *testing.T) {
	l := Limits{}.withDefaults()
	for _, tc := range []struct {
		body   string
		status int
		want   receiveParams
	}{
		{``, 0, receiveParams{Max: 10, Visibility: 30 * time.Second}},
		{`{}`, 0, receiveParams{Max: 10, Visibility: 30 * time.Second}},
		{`{"max":1,"wait":"5s","visibility":"1m"}`, 0, receiveParams{Max: 1, Wait: 5 * time.Second, Visibility: time.Minute}},
		{`{"max":0}`, 400, receiveParams{}},
		{`{"max":-1}`, 400, receiveParams{}},
		{`{"max":1001}`, 400, receiveParams{}},
		{`{"max":"10"}`, 400, receiveParams{}},
		{`{"max":1.5}`, 400, receiveParams{}},
		{`{"wait":"-1s"}`, 400, receiveParams{}},
		{`{"wait":"1h"}`, 400, receiveParams{}},
		{`{"visibility":"0s"}`, 400, receiveParams{}},
		{`{"visibility":"forever"}`, 400, receiveParams{}},
		{`{"topic":"x"}`, 400, receiveParams{}},
	} {
		var req api.ReceiveRequest
		err := decodeJSON(strings.NewReader(tc.body), &req, true)
		var p receiveParams
		if err == nil {
			p, err = receiveParamsOf(&req, l)
		}
		if tc.status != 0 {
			var re *requestError
			if !errors.As(err, &re) || re.status != tc.status {
				t.Errorf("%s: error = %v, want status %d", tc.body, err, tc.status)
			}
			continue
		}
		if err != nil || p != tc.want {
			t.Errorf("%s: params = %+v, %v; want %+v", tc.body, p, err, tc.want)
		}
	}
}

// FuzzDecodePut feeds arbitrary bodies to the put decoder: it must never
// panic, every error must be a client's error (400 or 413), and a body it
// accepts must give a valid message.
func FuzzDecodePut(f *testing.F) {
	for _, tc := range putCases {
		f.Add(tc.body)
	}
	f.Add(`{"payload":{"deep":[[[[[[[[1]]]]]]]]},"delay":"1h2m3.5s"}`)
	f.Fuzz(func(t *testing.T, body string) {
		m, err := decodePut(body, testMaxPayload)
		if err != nil {
			var re *requestError
			if !errors.As(err, &re) || (re.status != 400 && re.status != 413) || re.msg == "" {
				t.Fatalf("body %q: error %v is not a 400 or 413 with a message", body, err)
			}
			return
		}
		if len(m.Payload) > testMaxPayload {
			t.Fatalf("body %q: payload of %d bytes over the limit", body, len(m.Payload))
		}
		if m.Payload != nil && !json.Valid(m.Payload) {
			t.Fatalf("body %q: stored payload %q is not JSON", body, m.Payload)
		}
		if m.ID != "" && !validName(m.ID) {
			t.Fatalf("body %q: invalid id %q accepted", body, m.ID)
		}
		if m.DeliverAt.IsZero() {
			t.Fatalf("body %q: zero due time", body)
		}
		if m.DeliverAt.Before(testNow) || m.DeliverAt.After(queue.MaxDeliverAt()) {
			t.Fatalf("body %q: due %v, outside now to %v", body, m.DeliverAt, queue.MaxDeliverAt())
		}
	})
}

// FuzzDecodeRequests decodes arbitrary bodies as each of the other request
// kinds: never a panic, every error a 400 or 413.
func FuzzDecodeRequests(f *testing.F) {
	seeds := []string{``, `{}`, `{"messages":[{"delay":"1s"}]}`, `{"max":3,"wait":"1s","visibility":"2s"}`,
		`{"receipts":["r1","r2"]}`, `{"receipt":"r","delay":"5s"}`, `{"receipt":1}`, `{"messages":{}}`, "\xff"}
	for _, s := range seeds {
		f.Add(s)
	}
	l := Limits{MaxPayload: testMaxPayload}.withDefaults()
	check := func(t *testing.T, body string, err error) {
		t.Helper()
		if err == nil {
			return
		}
		var re *requestError
		if !errors.As(err, &re) || (re.status != 400 && re.status != 413) || re.msg == "" {
			t.Fatalf("body %q: error %v is not a 400 or 413 with a message", body, err)
		}
	}
	f.Fuzz(func(t *testing.T, body string) {
		var b api.BatchRequest
		err := decodeJSON(strings.NewReader(body), &b, false)
		if err == nil {
			for i := range b.Messages {
				if _, err = toMessage(&b.Messages[i], testNow, l.MaxPayload); err != nil {
					break
				}
			}
		}
		check(t, body, err)

		var rr api.ReceiveRequest
		if err = decodeJSON(strings.NewReader(body), &rr, true); err == nil {
			var p receiveParams
			p, err = receiveParamsOf(&rr, l)
			if err == nil && (p.Max < 1 || p.Max > l.MaxReceive || p.Wait < 0 || p.Wait > l.MaxWait || p.Visibility <= 0) {
				t.Fatalf("body %q: out-of-range params %+v accepted", body, p)
			}
		}
		check(t, body, err)

		var a api.AckRequest
		check(t, body, decodeJSON(strings.NewReader(body), &a, false))
		var n api.NackRequest
		if err = decodeJSON(strings.NewReader(body), &n, false); err == nil && n.Delay != nil {
			_, err = parseDuration("delay", *n.Delay)
		}
		check(t, body, err)
	})
}
