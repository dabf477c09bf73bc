package client

import (
	"context"
	"maps"
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tockwheel/tock/queue"
)

// The headers of the W3C trace context (https://www.w3.org/TR/trace-context/).
const (
	headerTraceparent = "traceparent"
	headerTracestate  = "tracestate"
)

// traceContext is the propagator of the W3C trace context, the one the worker runtime extracts.
var traceContext propagation.TraceContext

// traceHeaders returns h with the W3C trace context of the span ctx carries (traceparent, and
// tracestate when the span has a trace state), so that the span of the handler that receives the
// message continues the caller's trace (see package worker). It returns h itself, unchanged, when
// ctx carries no valid span context, when the caller set either header itself (in any case: a
// header the caller set is never overwritten), or when the two would take h beyond the bounds of
// queue.CheckHeaders (a trace context never makes a valid Put invalid). h is never modified: a
// copy is made when something is added. Without a span in ctx this costs one lookup of a context
// value, and no allocation.
func traceHeaders(ctx context.Context, h map[string]string) map[string]string {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return h
	}
	for k := range h {
		if strings.EqualFold(k, headerTraceparent) || strings.EqualFold(k, headerTracestate) {
			return h
		}
	}
	out := make(map[string]string, len(h)+2)
	maps.Copy(out, h)
	traceContext.Inject(ctx, propagation.MapCarrier(out))
	if len(out) > queue.MaxHeaders || queue.HeadersSize(out) > queue.MaxHeadersSize {
		return h
	}
	return out
}

// injectHTTP sets the W3C trace context of the span ctx carries on the request's HTTP headers,
// so that tockd's span of the request, when it traces, is a child of the caller's. Without a span
// in ctx it does nothing.
func injectHTTP(ctx context.Context, h http.Header) {
	if trace.SpanContextFromContext(ctx).IsValid() {
		traceContext.Inject(ctx, propagation.HeaderCarrier(h))
	}
}
