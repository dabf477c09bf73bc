package server

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tockwheel/tock/api"
)

// TestPastDueTimeIsDueAtThePut is the regression test of a deliver_at in
// 2001 adding 25.9 years to tock_delivery_lateness_seconds_sum, and of a
// date before 1970 echoed as given but delivered as "now": the due time is
// the later of deliver_at and the put, it is what the put echoes and the
// delivery reports, and lateness counts from it.
func TestPastDueTimeIsDueAtThePut(t *testing.T) {
	ts, _ := newTestServer(t)
	for _, at := range []string{"2001-01-01T00:00:00Z", "1901-01-01T00:00:00Z"} {
		before := time.Now()
		r := call(t, ts, "POST", "/v1/topics/past/messages", `{"deliver_at":"`+at+`"}`)
		after := time.Now()
		var put struct {
			ID        string    `json:"id"`
			DeliverAt time.Time `json:"deliver_at"`
		}
		r.json(t, &put)
		if r.status != 201 || put.DeliverAt.Before(before) || put.DeliverAt.After(after) {
			t.Fatalf("put due %s: %d %s; want 201 echoing a time between %v and %v", at, r.status, r.body, before, after)
		}
		r = call(t, ts, "POST", "/v1/topics/past/receive", `{"wait":"5s"}`)
		var got struct {
			Messages []struct {
				ID        string    `json:"id"`
				DeliverAt time.Time `json:"deliver_at"`
			} `json:"messages"`
		}
		r.json(t, &got)
		// The engine takes the later of the echoed time and its own clock at the put, which can
		// be a little later than the server's, rounded up to its precision (a millisecond).
		if len(got.Messages) != 1 || got.Messages[0].ID != put.ID || got.Messages[0].DeliverAt.Before(put.DeliverAt) ||
			got.Messages[0].DeliverAt.After(after.Add(time.Millisecond)) {
			t.Fatalf("received %s; want %s due at %v as echoed", r.body, put.ID, put.DeliverAt)
		}
	}
	r := call(t, ts, "GET", "/metrics", "")
	if sum := metricValue(t, r.body, `tock_delivery_lateness_seconds_sum{topic="past"}`); sum > 10 {
		t.Errorf("tock_delivery_lateness_seconds_sum = %v s after two deliveries due at their put", sum)
	}
	var st api.Stats
	call(t, ts, "GET", "/v1/stats", "").json(t, &st)
	if st.Lateness.Count != 2 || st.Lateness.Max > 10 {
		t.Errorf("stats lateness %+v; want 2 deliveries, none late by more than seconds", st.Lateness)
	}
}

// TestDueTimeBeyondRangeIsAPlainError checks the upper end of the accepted
// range: up to queue.MaxDeliverAt, 2262-01-01T00:00:00Z, and beyond it a
// message that says so, with no engine internals in it.
func TestDueTimeBeyondRangeIsAPlainError(t *testing.T) {
	ts, _ := newTestServer(t)
	if r := call(t, ts, "POST", "/v1/topics/far/messages", `{"deliver_at":"2262-01-01T00:00:00Z"}`); r.status != 201 {
		t.Fatalf("latest due time: %d %s", r.status, r.body)
	}
	for _, body := range []string{`{"deliver_at":"2262-01-01T00:00:00.000000001Z"}`, `{"deliver_at":"2300-01-01T00:00:00Z"}`,
		`{"delay":"2562047h"}`, `{"messages":[{},{"delay":"2500000h"}]}`} {
		path := "/v1/topics/far/messages"
		if strings.Contains(body, "messages") {
			path = "/v1/topics/far/batch"
		}
		r := call(t, ts, "POST", path, body)
		msg := r.errorMsg(t)
		if r.status != 400 || !strings.Contains(msg, "after 2262-01-01T00:00:00Z, the latest due time accepted") || strings.Contains(msg, "delayq") {
			t.Errorf("%s: %d %q; want 400 naming the latest due time", body, r.status, msg)
		}
	}
}

// TestPayloadLimitIsCompactJSON is the regression test of a 1,047,580-byte
// compact payload sent with 2,000 spaces getting 413, while Limits counts
// bytes of compact JSON.
func TestPayloadLimitIsCompactJSON(t *testing.T) {
	ts, _ := newTestServer(t)
	str := strings.Repeat("x", 1_047_578) // with its quotes, 1,047,580 bytes
	r := call(t, ts, "POST", "/v1/topics/ws/messages", `{"payload": `+strings.Repeat(" ", 2000)+`"`+str+`"}`)
	if r.status != 201 {
		t.Fatalf("compact payload under the limit sent with whitespace: %d %.200s", r.status, r.body)
	}
	over := `"` + strings.Repeat("x", 1<<20-1) + `"` // 1 MiB + 1 compact
	r = call(t, ts, "POST", "/v1/topics/ws/messages", `{"payload":`+over+`}`)
	if r.status != 413 || !strings.Contains(r.errorMsg(t), "compact JSON") {
		t.Fatalf("payload one byte over: %d %.200s", r.status, r.body)
	}
	r = call(t, ts, "POST", "/v1/topics/ws/receive", `{"wait":"5s"}`)
	var got struct {
		Messages []struct {
			Payload json.RawMessage `json:"payload"`
		} `json:"messages"`
	}
	r.json(t, &got)
	if len(got.Messages) != 1 || len(got.Messages[0].Payload) != 1_047_580 {
		t.Fatalf("received %d messages", len(got.Messages))
	}
}
