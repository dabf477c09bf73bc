package client

import (
	"context"
	"fmt"
	"maps"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/tockwheel/tock/queue"
)

// TestTraceHeaders checks what Put adds to a message's headers: the W3C trace context of the
// caller's span, only when there is one; never over a header the caller set, whatever its case;
// never beyond the bounds of headers; never into the caller's map.
func TestTraceHeaders(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("test").Start(context.Background(), "produce")
	defer span.End()
	sc := span.SpanContext()
	want := fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())

	if h := traceHeaders(context.Background(), nil); h != nil {
		t.Fatalf("without a span: %q; want nil", h)
	}
	mine := map[string]string{"k": "v"}
	if h := traceHeaders(context.Background(), mine); len(h) != 1 {
		t.Fatalf("without a span: %q; want the caller's alone", h)
	}
	if h := traceHeaders(ctx, nil); len(h) != 1 || h["traceparent"] != want {
		t.Fatalf("in a span: %q; want traceparent %s", h, want)
	}
	h := traceHeaders(ctx, mine)
	if len(h) != 2 || h["traceparent"] != want || h["k"] != "v" || len(mine) != 1 {
		t.Fatalf("in a span, beside the caller's: %q (the caller's now %q)", h, mine)
	}
	for _, k := range []string{"traceparent", "Traceparent", "tracestate", "TRACESTATE"} {
		set := map[string]string{k: "mine"}
		if h := traceHeaders(ctx, set); !maps.Equal(h, set) {
			t.Fatalf("with %s set by the caller: %q; want it alone, as set", k, h)
		}
	}
	withState := trace.ContextWithSpanContext(ctx, sc.WithTraceState(must(trace.ParseTraceState("vendor=x"))))
	if h := traceHeaders(withState, nil); h["tracestate"] != "vendor=x" || h["traceparent"] != want {
		t.Fatalf("with a trace state: %q", h)
	}
	full := map[string]string{}
	for i := range queue.MaxHeaders {
		full[fmt.Sprint("k", i)] = ""
	}
	if h := traceHeaders(ctx, full); len(h) != queue.MaxHeaders {
		t.Fatalf("beside %d headers: %d; want the caller's alone", queue.MaxHeaders, len(h))
	}
	// Without a span the put path allocates nothing more.
	if n := testing.AllocsPerRun(100, func() { traceHeaders(context.Background(), mine) }); n != 0 {
		t.Fatalf("without a span: %v allocations; want 0", n)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
