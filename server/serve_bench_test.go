package server

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/queue"
)

// BenchmarkServeHTTP measures one request through the Server's handler,
// without a network, so that the cost of what runs before the route (path,
// host, origin, token and content-type checks, metrics) shows beside the
// route's own work. The puts go to a queue without fsync: with it, a put
// costs a millisecond of disk time that hides everything else.
//
//	go test ./server -run '^$' -bench ServeHTTP -count 5
//
// put is the anchor of put-headers (the same put with a traceparent header in its body) and
// put-traced (that put, its request carrying the trace context too, to a server that traces).
func BenchmarkServeHTTP(b *testing.B) {
	q, err := delayq.Open(b.TempDir(), delayq.WithNoSync())
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	s := New(q)
	// A server that traces every request (spans recorded, none exported), for a put whose
	// request carries a caller's trace context; s, without WithTracerProvider, is the anchor.
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	traced := New(q, WithTracerProvider(tp))
	for _, tc := range []struct{ name, method, path, body string }{
		{"healthz", "GET", "/healthz", ""},
		{"put", "POST", "/v1/topics/bench/messages", `{"payload":{"user":12345,"event":"reminder"},"delay":"1h"}`},
		{"put-headers", "POST", "/v1/topics/bench/messages", `{"payload":{"user":12345,"event":"reminder"},"delay":"1h",` +
			`"headers":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}`},
		{"put-traced", "POST", "/v1/topics/bench/messages", `{"payload":{"user":12345,"event":"reminder"},"delay":"1h",` +
			`"headers":{"traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}`},
		{"batch-32", "POST", "/v1/topics/bench/batch", batch32},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			srv := s
			if tc.name == "put-traced" {
				srv = traced
			}
			for b.Loop() {
				req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
				if tc.body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				if srv == traced {
					req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
				}
				rec := httptest.NewRecorder()
				srv.ServeHTTP(rec, req)
				if rec.Code >= 300 {
					b.Fatalf("%s %s: %d %s", tc.method, tc.path, rec.Code, rec.Body)
				}
			}
		})
	}
}

// batch32 is a batch of 32 puts as the Go client coalesces them: each a 100-byte payload due in
// an hour.
var batch32 = `{"messages":[` + strings.TrimSuffix(strings.Repeat(`{"payload":"`+strings.Repeat("x", 98)+`","delay":"1h0m0s"},`, 32), ",") + `]}`

// BenchmarkServeHTTPReceive measures a consumer's round through the Server's handler, without a
// network: a receive of 100 due messages and the ack of their receipts, the requests of a burst's
// delivery. The 100 messages are put on the queue directly first, in the round.
//
//	go test ./server -run '^$' -bench ServeHTTPReceive -benchmem -count 5
func BenchmarkServeHTTPReceive(b *testing.B) {
	q, err := delayq.Open(b.TempDir(), delayq.WithNoSync())
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	s := New(q)
	ctx := context.Background()
	ms := make([]queue.Message, 100)
	for i := range ms {
		ms[i] = queue.Message{Topic: "bench", Payload: json.RawMessage(`"` + strings.Repeat("x", 98) + `"`)}
	}
	serve := func(path, body string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		s.ServeHTTP(rec, req)
		if rec.Code >= 300 {
			b.Fatalf("POST %s: %d %s", path, rec.Code, rec.Body)
		}
		return rec
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := q.PutBatch(ctx, ms); err != nil {
			b.Fatal(err)
		}
		rec := serve(api.ReceivePath("bench"), `{"max":100,"wait":"2s","visibility":"30s"}`)
		var res api.ReceiveResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &res); err != nil || len(res.Messages) != len(ms) {
			b.Fatalf("receive: %d messages, %v", len(res.Messages), err)
		}
		ack := api.AckRequest{Receipts: make([]string, len(res.Messages))}
		for i, d := range res.Messages {
			ack.Receipts[i] = d.Receipt
		}
		body, _ := json.Marshal(ack)
		serve(api.PathAck, string(body))
	}
}
