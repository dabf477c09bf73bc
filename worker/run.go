package worker

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"sync"
	"time"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/queue"
)

// settleTimeout bounds an ack or nack; the engine's calls return sooner unless it is unreachable.
const settleTimeout = 10 * time.Second

// A run is one call of Worker.Run: its receive loops, its running jobs, and how it stops.
type run struct {
	w     *Worker
	wheel *tock.Wheel
	own   bool // the wheel is the run's, stopped by close

	// loops ends the receive loops: when Run's context ends, or on a fatal error.
	loops     context.Context
	stopLoops context.CancelFunc
	// base is the parent of the handlers' contexts: Run's values, without its cancellation, so
	// that handlers finish after Run's context ends.
	base context.Context

	handlers sync.WaitGroup

	mu    sync.Mutex
	jobs  map[*job]struct{} // running, not yet settled
	fatal error

	// The acks of handlers that succeeded, sent together: one Ack carries those that finished
	// while the last was in flight, so that under load a topic costs the engine one call (one
	// request, one sync) per batch rather than per message, and no ack waits when it is idle.
	ackMu  sync.Mutex
	ackq   []*job
	acking bool // an acker goroutine is sending ackq
}

// maxAckBatch bounds the receipts of one Ack.
const maxAckBatch = 1000

// A job is one delivered message and its handler.
type job struct {
	topic  string
	d      queue.Delivery
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu       sync.Mutex
	leaseEnd time.Time  // when the lease ends, by this process's clock, at the earliest
	timer    tock.Timer // the next extension
	settled  bool       // acked, nacked or handed back: nothing more is sent of it
	acked    chan error // the outcome of its ack, from the acker
}

func newRun(w *Worker, ctx context.Context) *run {
	r := &run{w: w, wheel: w.cfg.wheel, jobs: make(map[*job]struct{})}
	if r.wheel == nil {
		r.wheel, r.own = tock.New(), true
	}
	r.loops, r.stopLoops = context.WithCancel(ctx)
	r.base = context.WithoutCancel(ctx)
	return r
}

func (r *run) close() {
	r.stopLoops()
	if r.own {
		r.wheel.Stop()
	}
}

// run runs the loops until they stop, then shuts down: it waits for the handlers up to the
// shutdown timeout, and hands back the messages of those still running.
func (r *run) run(ctx context.Context, handlers map[string]Handler) error {
	var loops sync.WaitGroup
	for topic, h := range handlers {
		loops.Add(1)
		go func() {
			defer loops.Done()
			r.loop(topic, h)
		}()
	}
	loops.Wait()
	done := make(chan struct{})
	go func() {
		r.handlers.Wait()
		close(done)
	}()
	t := time.NewTimer(r.w.cfg.shutdown)
	select {
	case <-done:
	case <-t.C:
		r.handBack()
	}
	t.Stop()
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fatal
}

// fail records a fatal error and stops the loops.
func (r *run) fail(err error) {
	r.mu.Lock()
	if r.fatal == nil {
		r.fatal = err
	}
	r.mu.Unlock()
	r.stopLoops()
}

// loop receives the messages of topic, as many at a time as it has free places, and starts a job
// for each, until the loops stop.
func (r *run) loop(topic string, h Handler) {
	cfg := &r.w.cfg
	free := make(chan struct{}, cfg.concurrency)
	for range cfg.concurrency {
		free <- struct{}{}
	}
	var wait time.Duration // after a failed receive
	for {
		select {
		case <-free:
		case <-r.loops.Done():
			return
		}
		n := 1
	take:
		for n < cfg.maxReceive {
			select {
			case <-free:
				n++
			default:
				break take
			}
		}
		asked := time.Now()
		ds, err := r.w.e.Receive(r.loops, topic, n, cfg.visibility)
		for range n - len(ds) {
			free <- struct{}{}
		}
		for _, d := range ds {
			r.start(topic, h, d, asked, free)
		}
		switch {
		case err == nil:
			wait = 0
		case r.loops.Err() != nil:
			return
		case errors.Is(err, queue.ErrClosed):
			r.fail(fmt.Errorf("worker: receive from %q: %w", topic, err))
			return
		default:
			r.w.m.errors.WithLabelValues(topic, "receive").Inc()
			wait = min(max(2*wait, 100*time.Millisecond), 5*time.Second)
			r.w.cfg.logger.Warn("worker: receive failed; trying again", "topic", topic, "in", wait, "err", err)
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-r.loops.Done():
				t.Stop()
				return
			}
		}
	}
}

// start runs the handler of d, leased by a receive asked at asked, and gives its place back to
// free when the handler returns.
func (r *run) start(topic string, h Handler, d queue.Delivery, asked time.Time, free chan<- struct{}) {
	vis := r.w.cfg.visibility
	j := &job{topic: topic, d: d, leaseEnd: asked.Add(vis)}
	j.ctx, j.cancel = context.WithCancelCause(r.base)
	r.mu.Lock()
	r.jobs[j] = struct{}{}
	r.mu.Unlock()
	j.mu.Lock()
	r.armLocked(j, asked.Add(vis/3))
	j.mu.Unlock()
	r.handlers.Add(1)
	go func() {
		defer r.handlers.Done()
		m := r.w.m
		m.inFlight.WithLabelValues(topic).Inc()
		began := time.Now()
		ctx, span := startSpan(j.ctx, r.w.tracer, topic, j.d)
		err := r.call(h, ctx, j)
		endSpan(span, err)
		m.duration.WithLabelValues(topic).Observe(time.Since(began).Seconds())
		m.inFlight.WithLabelValues(topic).Dec()
		// The handler's place is free: its ack or nack goes on beside the next receive, so that
		// a topic's throughput is not bound by the round trips of its acks.
		free <- struct{}{}
		r.finish(j, err)
	}()
}

// call runs the handler in ctx (j's, with the handler's span), turning a panic into a
// *PanicError.
func (r *run) call(h Handler, ctx context.Context, j *job) (err error) {
	defer func() {
		if v := recover(); v != nil {
			pe := &PanicError{Value: v, Stack: debug.Stack()}
			r.w.cfg.logger.Error("worker: handler panicked", "topic", j.topic, "id", j.d.ID, "panic", fmt.Sprint(v), "stack", string(pe.Stack))
			err = pe
		}
	}()
	return h.Handle(ctx, j.d)
}

// armLocked sets j's next extension at at.
func (r *run) armLocked(j *job, at time.Time) {
	t, err := r.wheel.AtFunc(at, func() { go r.extend(j) })
	if err != nil {
		// The wheel given with WithWheel was stopped by its owner: no more extensions.
		r.w.cfg.logger.Error("worker: cannot time lease extensions", "err", err)
		return
	}
	j.timer = t
}

// extend extends j's lease, and sets the next extension: a third of the visibility on, or sooner
// after a failure, as long as the lease lasts. A refusal, or a lease that ends first, loses it.
func (r *run) extend(j *job) {
	vis := r.w.cfg.visibility
	j.mu.Lock()
	end := j.leaseEnd
	settled := j.settled
	j.mu.Unlock()
	if settled {
		return
	}
	at := time.Now()
	if !at.Before(end) {
		r.lose(j, errors.New("the lease ended before an extension succeeded"))
		return
	}
	ctx, cancel := context.WithDeadline(r.base, end)
	err := r.w.e.Extend(ctx, j.d.Receipt, vis)
	cancel()
	switch {
	case err == nil:
		r.w.m.extends.WithLabelValues(j.topic).Inc()
		j.mu.Lock()
		if !j.settled {
			j.leaseEnd = at.Add(vis)
			r.armLocked(j, at.Add(vis/3))
		}
		j.mu.Unlock()
	case errors.Is(err, queue.ErrUnknownReceipt):
		r.lose(j, err)
	default:
		r.w.m.errors.WithLabelValues(j.topic, "extend").Inc()
		next := time.Now().Add(max(vis/10, time.Millisecond))
		j.mu.Lock()
		if !j.settled {
			if next.After(j.leaseEnd) {
				next = j.leaseEnd
			}
			r.armLocked(j, next)
		}
		j.mu.Unlock()
	}
}

// lose cancels j's handler: its lease is lost.
func (r *run) lose(j *job, why error) {
	j.mu.Lock()
	settled := j.settled
	j.mu.Unlock()
	if settled {
		return // its handler returned meanwhile
	}
	r.w.cfg.logger.Warn("worker: lease lost; the message may be delivered again", "topic", j.topic, "id", j.d.ID, "err", why)
	j.cancel(ErrLeaseLost)
}

// finish reports what j's handler returned to the engine, unless j was handed back meanwhile.
func (r *run) finish(j *job, err error) {
	j.mu.Lock()
	j.timer.Stop()
	settled := j.settled
	j.settled = true
	j.mu.Unlock()
	r.mu.Lock()
	delete(r.jobs, j)
	r.mu.Unlock()
	defer j.cancel(nil)
	if settled {
		return
	}
	m, topic := r.w.m, j.topic
	if err == nil {
		r.report(j, "ack", outcomeAcked, r.ack(j))
		return
	}
	ctx, cancel := context.WithTimeout(r.base, settleTimeout)
	defer cancel()
	reason := queue.WithReason(queue.CutReason(err.Error()))
	var pe *permanentError
	var pa *PanicError
	var ra *retryAfterError
	switch {
	case errors.As(err, &pe):
		m.failures.WithLabelValues(topic, "permanent").Inc()
		r.report(j, "nack", outcomeDeadLettered, r.w.e.Nack(ctx, j.d.Receipt, 0, reason, queue.WithDeadLetter()))
		return
	case errors.As(err, &pa):
		m.failures.WithLabelValues(topic, "panic").Inc()
	default:
		m.failures.WithLabelValues(topic, "error").Inc()
	}
	delay := r.w.cfg.backoff(j.d.Attempt)
	if errors.As(err, &ra) {
		delay = ra.after
	}
	r.report(j, "nack", outcomeRetried, r.w.e.Nack(ctx, j.d.Receipt, max(delay, 0), reason))
}

// report counts the outcome of an ack or nack of j's message.
func (r *run) report(j *job, call, outcome string, err error) {
	m := r.w.m
	switch {
	case err == nil:
		m.handled.WithLabelValues(j.topic, outcome).Inc()
	case errors.Is(err, queue.ErrUnknownReceipt):
		m.handled.WithLabelValues(j.topic, outcomeLost).Inc()
		r.w.cfg.logger.Warn("worker: "+call+" refused: the lease was lost, and the message may be delivered again",
			"topic", j.topic, "id", j.d.ID, "err", err)
	default:
		m.errors.WithLabelValues(j.topic, call).Inc()
		r.w.cfg.logger.Error("worker: "+call+" failed; the message will be delivered again when its lease ends",
			"topic", j.topic, "id", j.d.ID, "err", err)
	}
}

// handBack ends the jobs still running at the shutdown timeout: their handlers' contexts end with
// ErrShutdown, and their messages are nacked, due at once, concurrently.
func (r *run) handBack() {
	r.mu.Lock()
	jobs := make([]*job, 0, len(r.jobs))
	for j := range r.jobs {
		jobs = append(jobs, j)
	}
	r.jobs = make(map[*job]struct{})
	r.mu.Unlock()
	var wg sync.WaitGroup
	for _, j := range jobs {
		j.mu.Lock()
		settled := j.settled
		j.settled = true
		j.timer.Stop()
		j.mu.Unlock()
		if settled {
			continue
		}
		j.cancel(ErrShutdown)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(r.base, settleTimeout)
			defer cancel()
			err := r.w.e.Nack(ctx, j.d.Receipt, 0, queue.WithReason("worker shut down before the handler returned"))
			r.report(j, "nack", outcomeHandedBack, err)
		}()
	}
	wg.Wait()
}

// ack acks j's message with those of other handlers that finished meanwhile, and returns the
// outcome of its receipt.
func (r *run) ack(j *job) error {
	j.acked = make(chan error, 1)
	r.ackMu.Lock()
	r.ackq = append(r.ackq, j)
	start := !r.acking
	r.acking = true
	r.ackMu.Unlock()
	if start {
		go r.acker()
	}
	return <-j.acked
}

// acker sends the queued acks, a batch per Ack, until none is left.
func (r *run) acker() {
	for {
		r.ackMu.Lock()
		n := min(len(r.ackq), maxAckBatch)
		if n == 0 {
			r.acking = false
			r.ackMu.Unlock()
			return
		}
		batch := make([]*job, n)
		copy(batch, r.ackq)
		r.ackq = append(r.ackq[:0], r.ackq[n:]...)
		r.ackMu.Unlock()
		receipts := make([]string, n)
		for i, j := range batch {
			receipts[i] = j.d.Receipt
		}
		ctx, cancel := context.WithTimeout(r.base, settleTimeout)
		err := r.w.e.Ack(ctx, receipts...)
		cancel()
		var failed map[string]error
		var ae *queue.AckError
		if errors.As(err, &ae) {
			failed = make(map[string]error, len(ae.Failed))
			for _, f := range ae.Failed {
				failed[f.Receipt] = f.Err
			}
			err = nil
		}
		for _, j := range batch {
			if e, ok := failed[j.d.Receipt]; ok {
				j.acked <- e
			} else {
				j.acked <- err
			}
		}
	}
}
