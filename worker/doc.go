// Package worker runs handlers on the messages of a [queue.Engine]: the consumer's loop of
// receive, handle, ack or nack, with everything that loop gets wrong when each program writes it
// again. It works on any engine of the contract: delayq embedded, redisq, or a tockd server
// through the Go client ([client.Client.Engine]), in the manner of asynq's Server and River's
// workers.
//
// # Basics
//
//	w := worker.New(engine, worker.WithConcurrency(64), worker.WithRegisterer(prometheus.DefaultRegisterer))
//	w.HandleFunc("email", func(ctx context.Context, d queue.Delivery) error {
//		if !valid(d.Payload) {
//			return worker.Permanent(errors.New("malformed address")) // to the dead letters at once
//		}
//		return send(ctx, d.Payload) // nil: acked; an error: retried after a backoff
//	})
//	err := w.Run(ctx) // until ctx ends, then a graceful shutdown
//
// For each topic it handles, a Worker runs at most its concurrency of handlers at once, and asks
// the engine for as many messages as it has room for, no more: a receive waits (on the engine's
// terms: no polling) while the topic has nothing due. Each message is leased for the visibility
// ([WithVisibility]); while its handler runs, the lease is extended ([queue.Engine.Extend]) every
// third of it, so that a handler may run for as long as its work takes without the message being
// delivered to another consumer. When the lease cannot be kept (the engine refuses the extension,
// or fails to answer until the lease ends) the handler's context is cancelled with the cause
// [ErrLeaseLost]: another consumer may have the message by then.
//
// When the handler returns nil the message is acked. An error nacks it, due again after the
// backoff of its attempt ([WithBackoff], or the delay of an error made by [RetryAfter]), with the
// error's text as the reason its last failure reports; after the engine's maximum attempts it
// goes to the dead letters, as the engine decides. An error wrapped by [Permanent] sends it to
// the dead letters at once ([queue.WithDeadLetter]). A handler that panics is recovered: the panic
// is logged with its stack and counted as a failure, and the message is nacked as for an error.
//
// [Worker.Run] returns when its context ends, after a graceful shutdown: it stops receiving, lets
// running handlers finish for up to the shutdown timeout ([WithShutdownTimeout]), and then cancels
// the contexts of those still running (cause [ErrShutdown]) and hands their messages back, due at
// once, without waiting for them further.
//
// With [WithRegisterer], a Worker exports Prometheus metrics, labelled by topic:
// tock_worker_handled_total (handlers that returned, by outcome: acked, retried, dead_lettered,
// handed_back, lost), tock_worker_failures_total (failed handlers, by kind: error, panic,
// permanent), tock_worker_in_flight (handlers running), tock_worker_handler_duration_seconds,
// tock_worker_extends_total and tock_worker_errors_total (calls to the engine that failed, by
// call).
//
// # Traces
//
// Each handler runs in an OpenTelemetry span ([WithTracerProvider]; by default the global
// provider, which makes none until the program sets one), a "process <topic>" span of kind
// consumer with the messaging attributes (messaging.system "tock", messaging.destination.name the
// topic, messaging.message.id, and tock.delivery.attempt). When the message's headers carry a W3C
// trace context ("traceparent", "tracestate"), as the Go client puts there when its caller's
// context has a span (see package client's Message), the handler's span is a child of that producer's span
// and links to it, so that one trace runs from the producer through the delay to the consumer;
// without one it is the root of a trace of its own. A handler that fails marks its span with an
// error. Spans of the handler's own work are children of its span: use the handler's context.
//
// # Caveats
//
// Delivery is at least once, as the engine's: a handler may see a message again after a crash,
// a lost lease or a lost ack, so handlers should be idempotent. A message handed back at shutdown,
// or nacked after an error, counts a failed attempt, as every Nack does. The lease a Worker
// believes it holds is measured from before the receive that took it, so it never outlives the
// engine's; a handler that ignores its context after [ErrLeaseLost] or [ErrShutdown] runs on,
// but its outcome is not reported to the engine once its message was handed back. Concurrency is
// per topic: two topics of one Worker run up to twice the bound together.
package worker
