package worker

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/tockwheel/tock/queue"
)

// tracerName names the instrumentation scope of the handlers' spans.
const tracerName = "github.com/tockwheel/tock/worker"

// traceContext is the propagator of the W3C trace context, the one the Go client injects into a
// message's headers ("traceparent", "tracestate").
var traceContext propagation.TraceContext

// startSpan starts the span of the handler of d on topic, in ctx, following the OpenTelemetry
// messaging conventions for a "process" span (kind consumer). When d's headers carry a W3C
// trace context (the producer's span, put there by the Go client), the span links to it and is
// its child: one trace runs from the producer through the delay to the consumer. The conventions
// require the link (a consumer of a batch has many producers) and let a span that processes one
// message take the producer as parent too; a handler processes one message, and the parent is
// what makes the trace one in every viewer, the link what keeps it correct in those that follow
// links. Without a trace context in the headers the span is a new root: it is never the child of
// a span that happens to be in the context Run was given.
func startSpan(ctx context.Context, tracer trace.Tracer, topic string, d queue.Delivery) (context.Context, trace.Span) {
	opts := []trace.SpanStartOption{
		trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(
			attribute.String("messaging.system", "tock"),
			attribute.String("messaging.operation.type", "process"),
			attribute.String("messaging.operation.name", "process"),
			attribute.String("messaging.destination.name", topic),
			attribute.String("messaging.message.id", d.ID),
			attribute.Int("tock.delivery.attempt", d.Attempt),
		),
	}
	producer := trace.SpanContextFromContext(traceContext.Extract(context.Background(), propagation.MapCarrier(d.Headers)))
	if producer.IsValid() {
		ctx = trace.ContextWithRemoteSpanContext(ctx, producer)
		opts = append(opts, trace.WithLinks(trace.Link{SpanContext: producer}))
	} else {
		opts = append(opts, trace.WithNewRoot())
	}
	return tracer.Start(ctx, "process "+topic, opts...)
}

// endSpan ends the span of a handler that returned err: an error sets its status, with the
// error recorded (a panic's value and stack among them).
func endSpan(span trace.Span, err error) {
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
	}
	span.End()
}
