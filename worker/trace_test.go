package worker_test

import (
	"context"
	"errors"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/server"
	"github.com/tockwheel/tock/worker"
)

// TestTraceRunsProducerToConsumer follows a trace from a producer's span through a put over HTTP
// (the Go client, tockd's server), the delay, and a Worker's handler, recorded by an in-memory
// exporter: the server's span of the put and the handler's span are children of the producer's
// span, in its trace, and the handler's span links to it; a message put by a caller without a
// span carries no trace context and its handler's span is a root; a traceparent the caller set
// is delivered as set, and its handler's span continues that trace instead; a failed handler's
// span says so.
func TestTraceRunsProducerToConsumer(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { tp.Shutdown(context.Background()) })

	q, err := delayq.Open(t.TempDir(), delayq.WithNoSync(), delayq.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	ts := httptest.NewServer(server.New(q, server.WithLogger(quiet), server.WithTracerProvider(tp)))
	t.Cleanup(ts.Close)
	c, err := client.New(ts.URL)
	if err != nil {
		t.Fatal(err)
	}
	e := c.Engine()

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pctx, producer := tp.Tracer("test").Start(ctx, "produce")
	const callerSet = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	delay := 200 * time.Millisecond
	traced, err := e.Put(pctx, queue.Message{Topic: "t", Payload: []byte(`"traced"`), DeliverAt: time.Now().Add(delay),
		Headers: map[string]string{"lang": "en"}})
	if err != nil {
		t.Fatal(err)
	}
	own, err := e.Put(pctx, queue.Message{Topic: "t", Payload: []byte(`"own"`), DeliverAt: time.Now().Add(delay),
		Headers: map[string]string{"traceparent": callerSet}})
	if err != nil {
		t.Fatal(err)
	}
	producer.End()
	plain, err := e.Put(ctx, queue.Message{Topic: "t", Payload: []byte(`"plain"`), DeliverAt: time.Now().Add(delay)})
	if err != nil {
		t.Fatal(err)
	}

	var mu sync.Mutex
	got := map[string]queue.Delivery{}
	spans := map[string]trace.SpanContext{}
	done := make(chan struct{})
	w := worker.New(e, worker.WithTracerProvider(tp), worker.WithLogger(quiet))
	w.HandleFunc("t", func(ctx context.Context, d queue.Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		got[d.ID], spans[d.ID] = d, trace.SpanContextFromContext(ctx)
		if len(got) == 3 {
			close(done)
		}
		if d.ID == plain {
			return worker.Permanent(errors.New("plain fails"))
		}
		return nil
	})
	stop := running(w)
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatalf("handled %d of 3 messages", len(got))
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	p := producer.SpanContext()
	if h := got[traced].Headers; h["lang"] != "en" || h["traceparent"] == "" || len(h) != 2 {
		t.Fatalf("headers of the message put in a span: %q; want lang and the span's traceparent", h)
	}
	if h := got[own].Headers; len(h) != 1 || h["traceparent"] != callerSet {
		t.Fatalf("headers of the message whose caller set a traceparent: %q; want it as set", h)
	}
	if h := got[plain].Headers; h != nil {
		t.Fatalf("headers of the message put without a span: %q; want none", h)
	}
	byID := map[trace.SpanID]tracetest.SpanStub{}
	for _, s := range exp.GetSpans() {
		byID[s.SpanContext.SpanID()] = s
	}
	handler := func(id string) tracetest.SpanStub {
		t.Helper()
		s, ok := byID[spans[id].SpanID()]
		if !ok || s.Name != "process t" || s.SpanKind != trace.SpanKindConsumer {
			t.Fatalf("the span of %s's handler: %+v; want an ended consumer span \"process t\"", id, s)
		}
		return s
	}

	s := handler(traced)
	if s.SpanContext.TraceID() != p.TraceID() || s.Parent.SpanID() != p.SpanID() {
		t.Fatalf("the handler's span is in trace %s under %s; want the producer's %s under %s",
			s.SpanContext.TraceID(), s.Parent.SpanID(), p.TraceID(), p.SpanID())
	}
	if len(s.Links) != 1 || s.Links[0].SpanContext.SpanID() != p.SpanID() || s.Links[0].SpanContext.TraceID() != p.TraceID() {
		t.Fatalf("the handler's span links to %+v; want the producer's span", s.Links)
	}
	if s.StartTime.Sub(producer.(sdktrace.ReadOnlySpan).StartTime()) < delay {
		t.Fatalf("the handler's span began %v after the producer's; the message was due after %v", s.StartTime.Sub(producer.(sdktrace.ReadOnlySpan).StartTime()), delay)
	}
	attrs := map[string]string{}
	for _, kv := range s.Attributes {
		attrs[string(kv.Key)] = kv.Value.Emit()
	}
	if attrs["messaging.system"] != "tock" || attrs["messaging.destination.name"] != "t" || attrs["messaging.message.id"] != traced ||
		attrs["messaging.operation.type"] != "process" {
		t.Fatalf("the handler's span's attributes: %v", attrs)
	}

	if s := handler(own); s.SpanContext.TraceID().String() != "0af7651916cd43dd8448eb211c80319c" || s.Parent.SpanID().String() != "b7ad6b7169203331" {
		t.Fatalf("the span of the message whose caller set its traceparent: trace %s under %s", s.SpanContext.TraceID(), s.Parent.SpanID())
	}
	if s := handler(plain); s.Parent.IsValid() || len(s.Links) != 0 || s.Status.Code.String() != "Error" {
		t.Fatalf("the span of the message put without a span: parent %v, links %v, status %v; want a root with an error status",
			s.Parent, s.Links, s.Status)
	}

	// The server's spans of the two puts made in the producer's span are its children.
	puts := 0
	for _, s := range exp.GetSpans() {
		if s.Name != "POST /v1/topics/{topic}/messages" {
			continue
		}
		if s.SpanKind != trace.SpanKindServer {
			t.Fatalf("the server's span of a put is a %v span", s.SpanKind)
		}
		if s.Parent.SpanID() == p.SpanID() && s.SpanContext.TraceID() == p.TraceID() {
			puts++
		}
	}
	if puts != 2 {
		t.Fatalf("%d server spans of a put are children of the producer's span; want 2", puts)
	}
}
