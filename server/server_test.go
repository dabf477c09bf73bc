package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/internal/contract"
)

// newTestServer serves a real delayq queue in a fresh directory.
func newTestServer(t *testing.T, opts ...Option) (*httptest.Server, *Server) {
	t.Helper()
	q, err := delayq.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := q.Close(); err != nil {
			t.Error(err)
		}
	})
	s := New(q, opts...)
	return newHTTPTestServer(t, s), s
}

// newHTTPTestServer serves s on a loopback port until the test ends, and validates every request
// and answer against the API's OpenAPI document (see package contract): a mismatch fails t.
func newHTTPTestServer(t *testing.T, s http.Handler) *httptest.Server {
	ts := httptest.NewServer(contract.Handler(t, s))
	t.Cleanup(ts.Close)
	return ts
}

type result struct {
	status int
	header http.Header
	body   []byte
}

func (r result) json(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("answer %d %q is not JSON: %v", r.status, r.body, err)
	}
}

// errorCode returns the "code" of an error answer, failing the test when
// the body is not a JSON error with a code.
func (r result) errorCode(t *testing.T) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
		Code  string `json:"code"`
	}
	r.json(t, &e)
	if e.Error == "" || e.Code == "" {
		t.Fatalf("answer %d %q is not an error with a code", r.status, r.body)
	}
	return e.Code
}

// errorMsg returns the {"error": ...} of an answer, failing the test when
// the body is not such an object.
func (r result) errorMsg(t *testing.T) string {
	t.Helper()
	var e struct {
		Error string `json:"error"`
	}
	r.json(t, &e)
	if e.Error == "" {
		t.Fatalf("answer %d %q has no error message", r.status, r.body)
	}
	return e.Error
}

// call sends a request to ts and returns the answer. A body is sent as
// application/json; hdr (name, value, ...) sets headers after that.
func call(t *testing.T, ts *httptest.Server, method, path, body string, hdr ...string) result {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, ts.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return do(t, ts, req)
}

// do sends req to ts and reads the whole answer.
func do(t *testing.T, ts *httptest.Server, req *http.Request) result {
	t.Helper()
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return result{resp.StatusCode, resp.Header, b}
}

func TestPutReceiveAck(t *testing.T) {
	ts, _ := newTestServer(t)

	r := call(t, ts, "POST", "/v1/topics/jobs/messages", `{"payload":{"n":1}}`)
	if r.status != 201 {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
	var put struct {
		ID        string    `json:"id"`
		DeliverAt time.Time `json:"deliver_at"`
	}
	r.json(t, &put)
	if put.ID == "" || put.DeliverAt.IsZero() {
		t.Fatalf("put answer %s", r.body)
	}

	r = call(t, ts, "POST", "/v1/topics/jobs/receive", `{"max":10,"wait":"5s","visibility":"30s"}`)
	if r.status != 200 {
		t.Fatalf("receive: %d %s", r.status, r.body)
	}
	var got struct {
		Messages []struct {
			ID        string          `json:"id"`
			Payload   json.RawMessage `json:"payload"`
			DeliverAt time.Time       `json:"deliver_at"`
			Receipt   string          `json:"receipt"`
			Attempt   int             `json:"attempt"`
		} `json:"messages"`
	}
	r.json(t, &got)
	if len(got.Messages) != 1 {
		t.Fatalf("received %s, want one message", r.body)
	}
	m := got.Messages[0]
	if m.ID != put.ID || string(m.Payload) != `{"n":1}` || m.Attempt != 1 || m.Receipt == "" ||
		m.DeliverAt.Before(put.DeliverAt) || m.DeliverAt.Sub(put.DeliverAt) > time.Second { // due at the later of deliver_at and the put
		t.Fatalf("received %+v, want id %s payload {\"n\":1} attempt 1 due %v", m, put.ID, put.DeliverAt)
	}

	if r = call(t, ts, "POST", "/v1/ack", `{"receipts":["`+m.Receipt+`"]}`); r.status != 204 {
		t.Fatalf("ack: %d %s", r.status, r.body)
	}
	// A retried ack succeeds (delayq, issue 9); an unknown receipt is a 400, not a 500.
	if r = call(t, ts, "POST", "/v1/ack", `{"receipts":["`+m.Receipt+`"]}`); r.status != 204 {
		t.Fatalf("second ack: %d %s, want 204", r.status, r.body)
	}
	if r = call(t, ts, "POST", "/v1/ack", `{"receipts":["00000001000000100000000000000001"]}`); r.status != 400 {
		t.Fatalf("ack of an unknown receipt: %d %s, want 400", r.status, r.body)
	}
	// Nothing left: an empty list after the wait, not an error.
	r = call(t, ts, "POST", "/v1/topics/jobs/receive", `{"wait":"10ms"}`)
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"messages":[]}` {
		t.Fatalf("empty receive: %d %s", r.status, r.body)
	}
}

func TestBatchCancelNack(t *testing.T) {
	ts, _ := newTestServer(t)
	r := call(t, ts, "POST", "/v1/topics/t.1/batch",
		`{"messages":[{"id":"later","delay":"1h","payload":1},{"payload":2},{"deliver_at":"2001-01-01T00:00:00Z","payload":3}]}`)
	if r.status != 201 {
		t.Fatalf("batch: %d %s", r.status, r.body)
	}
	var b struct {
		IDs       []string    `json:"ids"`
		DeliverAt []time.Time `json:"deliver_at"`
	}
	r.json(t, &b)
	if len(b.IDs) != 3 || b.IDs[0] != "later" {
		t.Fatalf("batch ids %v", b.IDs)
	}
	// Due times as a put answers them, resolved against the batch's one now.
	if d := b.DeliverAt; len(d) != 3 || d[0].Sub(d[1]) != time.Hour || !d[2].Equal(d[1]) {
		t.Fatalf("batch due times %v; want now+1h, now, now (not 2001)", d)
	}

	if r = call(t, ts, "DELETE", "/v1/messages/later", ""); r.status != 204 {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	if r = call(t, ts, "DELETE", "/v1/messages/later", ""); r.status != 404 {
		t.Fatalf("second cancel: %d %s, want 404", r.status, r.body)
	}
	r.errorMsg(t)

	r = call(t, ts, "POST", "/v1/topics/t.1/receive", `{"max":10}`)
	var got struct {
		Messages []struct {
			Payload json.RawMessage `json:"payload"`
			Receipt string          `json:"receipt"`
			Attempt int             `json:"attempt"`
		} `json:"messages"`
	}
	r.json(t, &got)
	if len(got.Messages) != 2 {
		t.Fatalf("received %s, want the two due messages", r.body)
	}
	// Nack one with no delay: it is due again at once, on its second attempt.
	if r = call(t, ts, "POST", "/v1/nack", `{"receipt":"`+got.Messages[0].Receipt+`","delay":"0s"}`); r.status != 204 {
		t.Fatalf("nack: %d %s", r.status, r.body)
	}
	r = call(t, ts, "POST", "/v1/topics/t.1/receive", `{"wait":"5s"}`)
	r.json(t, &got)
	if len(got.Messages) != 1 || got.Messages[0].Attempt != 2 {
		t.Fatalf("after nack received %s, want one message on attempt 2", r.body)
	}
}

// TestBadInput sends a client's mistakes through the whole server: each
// gets its 4xx and a JSON error saying what is wrong, never a 500.
func TestBadInput(t *testing.T) {
	ts, _ := newTestServer(t, WithLimits(Limits{MaxPayload: 1000, MaxBatch: 3}))
	big := `{"payload":"` + strings.Repeat("x", 2000) + `"}`
	for _, tc := range []struct {
		method, path, body string
		status             int
		msg                string
	}{
		{"POST", "/v1/topics/jobs/messages", `{"payload":`, 400, "malformed JSON"},
		{"POST", "/v1/topics/jobs/messages", `{"payload":1,"extra":2}`, 400, `unknown field "extra"`},
		{"POST", "/v1/topics/jobs/messages", `{"delay":"-5s"}`, 400, "negative"},
		{"POST", "/v1/topics/jobs/messages", `{"delay":"soon"}`, 400, "invalid duration"},
		{"POST", "/v1/topics/jobs/messages", `{"delay":"1s","deliver_at":"2030-01-01T00:00:00Z"}`, 400, "not both"},
		{"POST", "/v1/topics/jobs/messages", `{"deliver_at":"yesterday"}`, 400, "RFC 3339"},
		{"POST", "/v1/topics/jobs/messages", big, 413, "limit"},
		{"POST", "/v1/topics/jobs/messages", `{"payload":"` + strings.Repeat("x", 200<<10) + `"}`, 413, "exceeds"},
		{"POST", "/v1/topics/b%20ad/messages", `{}`, 400, "invalid topic"},
		{"POST", "/v1/topics/a%2Fb/messages", `{}`, 400, "invalid topic"},
		{"POST", "/v1/topics/" + strings.Repeat("t", 129) + "/messages", `{}`, 400, "invalid topic"},
		{"POST", "/v1/topics/jobs/batch", `{"messages":[]}`, 400, "at least one"},
		{"POST", "/v1/topics/jobs/batch", `{"messages":[{},{},{},{}]}`, 413, "at most 3"},
		{"POST", "/v1/topics/jobs/batch", `{"messages":[{},{"delay":"x"}]}`, 400, "messages[1]"},
		{"POST", "/v1/topics/jobs/batch", `{"messages":[{"id":"a"},{"id":"a"}]}`, 400, "repeats"},
		{"POST", "/v1/topics/jobs/batch", `{"messages":[{"id":"a","replace":true}]}`, 400, `messages[0]: field "replace"`},
		{"POST", "/v1/topics/jobs/messages", `{"id":"a","replace":1}`, 400, `"replace"`},
		{"POST", "/v1/topics/jobs/receive", `{"max":0}`, 400, `"max"`},
		{"POST", "/v1/topics/jobs/receive", `{"wait":"1h"}`, 400, "limit"},
		{"POST", "/v1/topics/jobs/receive", `{"visibility":"-1s"}`, 400, "negative"},
		{"POST", "/v1/ack", `{"receipts":[]}`, 400, "at least one"},
		{"POST", "/v1/ack", `{"receipts":["forged"]}`, 400, "receipt"},
		{"POST", "/v1/ack", `{"receipts":["00000000000000000000000000000001"]}`, 400, "receipt"},
		{"POST", "/v1/ack", `{"receipts":"r"}`, 400, `"receipts"`},
		{"POST", "/v1/nack", `{"receipt":"forged"}`, 400, "receipt"},
		{"POST", "/v1/nack", `{}`, 400, "empty"},
		{"POST", "/v1/nack", `{"receipt":"x","delay":"later"}`, 400, "invalid duration"},
		{"DELETE", "/v1/messages/no%20such", "", 400, "invalid id"},
		{"DELETE", "/v1/messages/nosuch", "", 404, "no pending message"},
		{"GET", "/v1/nothing", "", 404, "no such route"},
		{"GET", "/v1/ack", "", 405, "POST"},
		{"PUT", "/v1/topics/jobs/messages", `{}`, 405, "POST"},
		{"GET", "/v1/stats?history=-1", "", 400, "history"},
	} {
		r := call(t, ts, tc.method, tc.path, tc.body)
		if r.status != tc.status {
			t.Errorf("%s %s %.60s: status %d %s, want %d", tc.method, tc.path, tc.body, r.status, r.body, tc.status)
			continue
		}
		if msg := r.errorMsg(t); !strings.Contains(msg, tc.msg) {
			t.Errorf("%s %s %.60s: error %q, want it to mention %q", tc.method, tc.path, tc.body, msg, tc.msg)
		}
		if ct := r.header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type %q", tc.method, tc.path, ct)
		}
	}
}

func TestAuth(t *testing.T) {
	ts, _ := newTestServer(t, WithToken("s3cret"))
	for _, path := range []string{"/v1/stats", "/metrics", "/readyz", "/"} {
		r := call(t, ts, "GET", path, "")
		if r.status != 401 {
			t.Errorf("GET %s without token: %d, want 401", path, r.status)
			continue
		}
		r.errorMsg(t)
		if r = call(t, ts, "GET", path, "", "Authorization", "Bearer wrong"); r.status != 401 {
			t.Errorf("GET %s with a wrong token: %d, want 401", path, r.status)
		}
		if r = call(t, ts, "GET", path, "", "Authorization", "Bearer s3cret"); r.status != 200 {
			t.Errorf("GET %s with the token: %d, want 200", path, r.status)
		}
	}
	if r := call(t, ts, "POST", "/v1/topics/x/messages", `{}`); r.status != 401 {
		t.Errorf("put without token: %d, want 401", r.status)
	}
	if r := call(t, ts, "GET", "/healthz", ""); r.status != 200 {
		t.Errorf("healthz without token: %d, want 200", r.status)
	}
	// A browser sends the token as a Basic auth password after the challenge.
	r := call(t, ts, "GET", "/", "")
	if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Basic") {
		t.Errorf("status page challenge %q, want Basic", r.header.Get("WWW-Authenticate"))
	}
	req, _ := http.NewRequest("GET", ts.URL+"/v1/stats", nil)
	req.SetBasicAuth("anyone", "s3cret")
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Errorf("stats with Basic auth: %d, want 200", resp.StatusCode)
	}
}

func TestMetricsAndStats(t *testing.T) {
	ts, _ := newTestServer(t)
	call(t, ts, "POST", "/v1/topics/m/batch", `{"messages":[{},{},{"delay":"30m"}]}`)
	r := call(t, ts, "POST", "/v1/topics/m/receive", `{"max":1}`)
	var got struct {
		Messages []struct {
			Receipt string `json:"receipt"`
		} `json:"messages"`
	}
	r.json(t, &got)
	call(t, ts, "POST", "/v1/ack", `{"receipts":["`+got.Messages[0].Receipt+`"]}`)

	r = call(t, ts, "GET", "/metrics", "")
	for _, want := range []string{"tock_puts_total 3", "tock_deliveries_total 1", "tock_acks_total 1",
		"tock_scheduled_messages", "tock_due_messages", "tock_leased_messages",
		`tock_delivery_lateness_seconds_count{topic="m"} 1`, `tock_store_write_duration_seconds_count{op="batch"} 1`,
		`tock_due_lateness_seconds{quantile="0.99"}`} {
		if !strings.Contains(string(r.body), want) {
			t.Errorf("metrics lack %q", want)
		}
	}

	r = call(t, ts, "GET", "/v1/stats", "")
	var st api.Stats
	r.json(t, &st)
	if st.Puts != 3 || st.Deliveries != 1 || st.Acks != 1 || st.Lateness.Count != 1 || st.Scheduled < 1 {
		t.Errorf("stats: puts %d deliveries %d acks %d lateness count %d scheduled %d; want 3 1 1 1 >=1",
			st.Puts, st.Deliveries, st.Acks, st.Lateness.Count, st.Scheduled)
	}
	due := 0
	for _, n := range st.Forecast.Due {
		due += n
	}
	if len(st.Forecast.Due) != forecastSeconds || due != 1 {
		t.Errorf("forecast has %d seconds holding %d messages; want %d and 1", len(st.Forecast.Due), due, forecastSeconds)
	}

	r = call(t, ts, "GET", "/", "")
	if r.status != 200 || !strings.Contains(string(r.body), "<canvas") || strings.Contains(string(r.body), "://cdn") {
		t.Errorf("status page: %d, %d bytes", r.status, len(r.body))
	}
}

// TestDrainEndsLongPolls checks that a receive waiting for messages answers
// at once, empty, when the server drains, and that /readyz then fails.
func TestDrainEndsLongPolls(t *testing.T) {
	ts, s := newTestServer(t)
	done := make(chan result)
	go func() {
		done <- call(t, ts, "POST", "/v1/topics/idle/receive", `{"wait":"20s"}`)
	}()
	// Whether Drain comes before the poll starts or during its wait, the
	// answer must come at once rather than after 20s.
	start := time.Now()
	s.Drain()
	r := <-done
	if r.status != 200 || strings.TrimSpace(string(r.body)) != `{"messages":[]}` {
		t.Fatalf("drained receive: %d %s", r.status, r.body)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("drained receive took %v", d)
	}
	if r := call(t, ts, "GET", "/readyz", ""); r.status != 503 {
		t.Fatalf("readyz after drain: %d", r.status)
	}
}
