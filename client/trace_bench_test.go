package client

import (
	"context"
	"net/http/httptest"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/server"
)

// BenchmarkPutTrace measures a Put through the client to a server in the process (a queue without
// fsync), by what the caller's context and message carry: plain, the anchor (no headers, no span:
// tracing off); headers (two headers); noop-span (a span of OpenTelemetry's no-op provider, which
// is what a program that never set a provider has: tracing off); span (a recording span: its trace
// context is added to the headers and the HTTP request).
//
//	go test ./client -run '^$' -bench PutTrace -benchmem -count 3
func BenchmarkPutTrace(b *testing.B) {
	q, err := delayq.Open(b.TempDir(), delayq.WithNoSync())
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	ts := httptest.NewServer(server.New(q))
	defer ts.Close()
	c, err := New(ts.URL)
	if err != nil {
		b.Fatal(err)
	}
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	recording, span := tp.Tracer("bench").Start(context.Background(), "produce")
	defer span.End()
	off, _ := noop.NewTracerProvider().Tracer("bench").Start(context.Background(), "produce")
	payload := []byte(`{"user":12345,"event":"reminder"}`)
	for _, bc := range []struct {
		name    string
		ctx     context.Context
		headers map[string]string
	}{
		{"plain", context.Background(), nil},
		{"headers", context.Background(), map[string]string{"content-type": "application/json", "lang": "en"}},
		{"noop-span", off, nil},
		{"span", recording, nil},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := c.Put(bc.ctx, "bench", Message{Payload: payload, Delay: 3600e9, Headers: bc.headers}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
