package server

import (
	"encoding/json"
	"io"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/internal/contract"
)

// serve sends one request straight to s's handler, without a network, so
// that it can run in a synctest bubble; the exchange is validated against
// the OpenAPI document, as newHTTPTestServer's are.
func serve(t *testing.T, s *Server, method, path, body string) result {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req := httptest.NewRequest(method, path, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	rec := httptest.NewRecorder()
	contract.Handler(t, s).ServeHTTP(rec, req)
	return result{rec.Code, rec.Header(), rec.Body.Bytes()}
}

func receipts(t *testing.T, r result) []string {
	t.Helper()
	var got api.ReceiveResponse
	r.json(t, &got)
	var rcs []string
	for _, d := range got.Messages {
		rcs = append(rcs, d.Receipt)
	}
	return rcs
}

func ackBody(rcs ...string) string {
	b, _ := json.Marshal(api.AckRequest{Receipts: rcs})
	return string(b)
}

// TestAckAnswersPerReceipt is the regression test of an ack of good and
// stale receipts failing as a whole: the good ones were acked but not
// counted, and the answer did not say which failed. Good, forged, stale,
// empty and oversized receipts are acked in one request: the answer counts
// the acked ones and lists the index of each other one, and
// tock_acks_total counts what was acked.
func TestAckAnswersPerReceipt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		q, err := delayq.Open(t.TempDir(), delayq.WithNoSync(), delayq.WithBackoff(10*time.Millisecond, 10*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		defer q.Close()
		// Long polls run on a wheel the bubble stops.
		w := tock.New()
		defer w.Stop()
		s := New(q, WithWheel(w))
		if r := serve(t, s, "POST", "/v1/topics/t/batch", `{"messages":[{},{}]}`); r.status != 201 {
			t.Fatalf("batch: %d %s", r.status, r.body)
		}
		stale := receipts(t, serve(t, s, "POST", "/v1/topics/t/receive", `{"max":1,"visibility":"1s"}`))
		// Its lease runs out, and the message is leased again: the first
		// receipt is stale.
		time.Sleep(2 * time.Second)
		good := receipts(t, serve(t, s, "POST", "/v1/topics/t/receive", `{"max":10,"visibility":"1m"}`))
		if len(stale) != 1 || len(good) != 2 {
			t.Fatalf("received %d then %d messages; want 1, then 2 once the first lease ran out", len(stale), len(good))
		}
		req := []string{good[0], "forged", stale[0], good[1], strings.Repeat("0", 32), "", strings.Repeat("r", 2000)}
		r := serve(t, s, "POST", "/v1/ack", ackBody(req...))
		var body api.AckErrorBody
		r.json(t, &body)
		if r.status != 400 || body.Code != api.CodeUnknownReceipt || body.Acked != 2 || !slices.Equal(body.Failed, []int{1, 2, 4, 5, 6}) {
			t.Fatalf("ack of 2 good receipts among 5 bad: %d %s; want 400 unknown_receipt, acked 2, failed [1 2 4 5 6]", r.status, r.body)
		}
		for _, want := range []string{"5 of 7 receipts failed", "receipts[1]:", "receipts[6]: receipt of 2000 bytes"} {
			if !strings.Contains(body.Message, want) {
				t.Errorf("message %q does not say %q", body.Message, want)
			}
		}
		if len(r.body) > len(ackBody(req...)) {
			t.Errorf("answer of %d bytes to a request of %d", len(r.body), len(ackBody(req...)))
		}
		m := serve(t, s, "GET", "/metrics", "")
		if n := metricValue(t, m.body, "tock_acks_total"); n != 2 {
			t.Errorf("tock_acks_total = %v after a partial ack of 2; want 2", n)
		}
		var st api.Stats
		serve(t, s, "GET", "/v1/stats", "").json(t, &st)
		if st.Acks != 2 || st.Leased != 0 {
			t.Errorf("stats count %d acks and %d leased; want 2 and 0", st.Acks, st.Leased)
		}
		// Every receipt good: 204.
		if r := serve(t, s, "POST", "/v1/topics/t/batch", `{"messages":[{},{}]}`); r.status != 201 {
			t.Fatalf("batch: %d %s", r.status, r.body)
		}
		if r := serve(t, s, "POST", "/v1/ack", ackBody(receipts(t, serve(t, s, "POST", "/v1/topics/t/receive", `{"max":2}`))...)); r.status != 204 {
			t.Fatalf("ack of good receipts: %d %s", r.status, r.body)
		}
	})
}

// TestAckOfTinyReceiptsIsRefusedWhole checks the one ack refused before
// any receipt is acked: receipts so short that listing their indexes would
// make the answer larger than the request. No engine issues such receipts.
func TestAckOfTinyReceiptsIsRefusedWhole(t *testing.T) {
	ts, _ := newTestServer(t)
	call(t, ts, "POST", "/v1/topics/t/messages", `{}`)
	r := call(t, ts, "POST", "/v1/topics/t/receive", `{"wait":"5s"}`)
	var got api.ReceiveResponse
	r.json(t, &got)
	if len(got.Messages) != 1 {
		t.Fatalf("received %s", r.body)
	}
	tiny := make([]string, 20_000)
	for i := range tiny {
		tiny[i] = "x"
	}
	req := ackBody(append([]string{got.Messages[0].Receipt}, tiny...)...)
	r = call(t, ts, "POST", "/v1/ack", req)
	if r.status != 400 || r.errorCode(t) != api.CodeBadRequest || !strings.Contains(r.errorMsg(t), "too short") || len(r.body) > len(req) {
		t.Fatalf("ack of 20,000 one-byte receipts: %d %.300s; want a short 400 bad_request", r.status, r.body)
	}
	// Nothing was acked: the good receipt still is.
	if r := call(t, ts, "POST", "/v1/ack", ackBody(got.Messages[0].Receipt)); r.status != 204 {
		t.Fatalf("ack of the good receipt after the refused request: %d %s", r.status, r.body)
	}
	// Receipts of 3 bytes each, 20,000 of them, fit.
	for i := range tiny {
		tiny[i] = "xyz"
	}
	r = call(t, ts, "POST", "/v1/ack", ackBody(tiny...))
	var body api.AckErrorBody
	r.json(t, &body)
	if r.status != 400 || body.Code != api.CodeUnknownReceipt || len(body.Failed) != len(tiny) || len(r.body) > len(ackBody(tiny...)) {
		t.Fatalf("ack of 20,000 three-byte receipts: %d, %d failed, %d bytes; want 400 unknown_receipt listing all, smaller than the request",
			r.status, len(body.Failed), len(r.body))
	}
}

// TestIndexesFitBound sweeps receipt counts and lengths around the bound:
// whenever indexesFit accepts an ack, the list of every index is no larger
// in JSON than the list of receipts, and it refuses only lists of receipts
// a few bytes long.
func TestIndexesFitBound(t *testing.T) {
	for _, n := range []int{1, 9, 10, 11, 99, 100, 101, 999, 1000, 1001, 9999, 10_000, 10_001, 100_001} {
		for l := 0; l <= 6; l++ {
			rcs := make([]string, n)
			idx := make([]int, n)
			for i := range rcs {
				rcs[i] = strings.Repeat("r", l)
				idx[i] = i
			}
			fits := indexesFit(rcs)
			failed, _ := json.Marshal(idx)
			sent, _ := json.Marshal(rcs)
			if fits && len(failed) > len(sent) {
				t.Errorf("%d receipts of %d bytes: accepted, but the indexes take %d bytes, the receipts %d", n, l, len(failed), len(sent))
			}
			if !fits && l >= 5 {
				t.Errorf("%d receipts of %d bytes: refused", n, l)
			}
		}
	}
}
