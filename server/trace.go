package server

import (
	"net/http"
	"strings"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// tracerName names the instrumentation scope of the server's spans.
const tracerName = "github.com/tockwheel/tock/server"

// WithTracerProvider makes a span of every request with tp, following the OpenTelemetry
// conventions for an HTTP server span: named by the method and route ("POST
// /v1/topics/{topic}/messages"; the method alone for a path no route has), the child of the W3C
// trace context the request carries in its "traceparent" header (the Go client sends its
// caller's), with the route, the status code, and an error status for a 5xx. A nil tp, the
// default, makes no span, and costs nothing: the server never looks at a trace context then.
// tockd sets one when the standard OTEL_EXPORTER_OTLP_* environment variables name an endpoint.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return func(c *config) { c.tracer = tp }
}

// traceStart starts the span of r, whose route pattern is pattern ("" for none), and returns r
// with it in its context.
func traceStart(tracer trace.Tracer, r *http.Request, pattern string) (*http.Request, trace.Span) {
	ctx := propagation.TraceContext{}.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	name, route := r.Method, ""
	if pattern != "" {
		route = pattern
		if _, path, ok := strings.Cut(pattern, " "); ok {
			route = path
		}
		name = r.Method + " " + route
	}
	attrs := []attribute.KeyValue{
		attribute.String("http.request.method", r.Method),
		attribute.String("url.path", r.URL.Path),
	}
	if route != "" {
		attrs = append(attrs, attribute.String("http.route", route))
	}
	ctx, span := tracer.Start(ctx, name, trace.WithSpanKind(trace.SpanKindServer), trace.WithAttributes(attrs...))
	return r.WithContext(ctx), span
}

// traceEnd ends the span of a request answered with status.
func traceEnd(span trace.Span, status int) {
	span.SetAttributes(attribute.Int("http.response.status_code", status))
	if status >= 500 {
		span.SetStatus(codes.Error, http.StatusText(status))
	}
	span.End()
}
