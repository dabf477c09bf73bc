package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/tockwheel/tock/queue"
)

// A Handler handles one delivered message. Handle returns nil when the message is done (it is
// acked), or an error saying why not (it is nacked; see the package doc for [Permanent] and
// [RetryAfter]). ctx ends when the lease cannot be kept ([ErrLeaseLost]) or the Worker's shutdown
// timeout passed ([ErrShutdown]); read the cause with [context.Cause]. Handle is called
// concurrently, up to the Worker's concurrency per topic.
type Handler interface {
	Handle(ctx context.Context, d queue.Delivery) error
}

// A HandlerFunc is a function that is a Handler.
type HandlerFunc func(ctx context.Context, d queue.Delivery) error

// Handle calls f.
func (f HandlerFunc) Handle(ctx context.Context, d queue.Delivery) error { return f(ctx, d) }

// A Worker runs handlers on the messages of an engine's topics. Register handlers with Handle,
// then call Run. Its methods are safe for concurrent use.
type Worker struct {
	e      queue.Engine
	cfg    config
	m      *metrics
	tracer trace.Tracer

	mu       sync.Mutex
	handlers map[string]Handler
	running  bool
}

// ErrRunning is returned by Run while another Run of the same Worker runs.
var ErrRunning = errors.New("worker: already running")

// New returns a Worker of e with the options opts. It panics if e is nil or an option is invalid
// (naming it), and if the registerer of WithRegisterer refuses its metrics: a program's mistakes,
// as the conventions of tock's packages have it.
func New(e queue.Engine, opts ...Option) *Worker {
	if e == nil {
		panic("worker: New: nil queue.Engine")
	}
	cfg := defaultConfig()
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if err := cfg.validate(); err != nil {
		panic(err.Error())
	}
	tp := cfg.tracer
	if tp == nil {
		tp = otel.GetTracerProvider()
	}
	return &Worker{e: e, cfg: cfg, m: newMetrics(cfg.reg), tracer: tp.Tracer(tracerName), handlers: make(map[string]Handler)}
}

// Handle registers h for the messages of topic. It panics on an empty topic, a nil h, a topic
// registered already, or a call while Run runs.
func (w *Worker) Handle(topic string, h Handler) {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case topic == "":
		panic("worker: Handle: empty topic")
	case h == nil:
		panic(fmt.Sprintf("worker: Handle(%q): nil handler", topic))
	case w.handlers[topic] != nil:
		panic(fmt.Sprintf("worker: Handle(%q): the topic has a handler already", topic))
	case w.running:
		panic(fmt.Sprintf("worker: Handle(%q) while Run runs", topic))
	}
	w.handlers[topic] = h
}

// HandleFunc registers f for the messages of topic, as Handle does.
func (w *Worker) HandleFunc(topic string, f func(ctx context.Context, d queue.Delivery) error) {
	if f == nil {
		w.Handle(topic, nil)
		return
	}
	w.Handle(topic, HandlerFunc(f))
}

// Run handles the messages of the registered topics until ctx ends, then shuts down gracefully
// (see the package doc) and returns nil. It returns early with an error matching
// queue.ErrClosed when the engine is closed under it (after handing back what it can), and at
// once with an error when no handler is registered or another Run is running. A Worker may Run
// again after Run returned.
func (w *Worker) Run(ctx context.Context) error {
	w.mu.Lock()
	if w.running {
		w.mu.Unlock()
		return ErrRunning
	}
	if len(w.handlers) == 0 {
		w.mu.Unlock()
		return errors.New("worker: Run with no handler: call Handle first")
	}
	w.running = true
	handlers := make(map[string]Handler, len(w.handlers))
	for t, h := range w.handlers {
		handlers[t] = h
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		w.running = false
		w.mu.Unlock()
	}()
	r := newRun(w, ctx)
	defer r.close()
	return r.run(ctx, handlers)
}
