package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/queue"
)

// The embedded engine comes back by itself from a full or failing disk: reopening is the
// way a delayq.Queue stopped by a failed write or sync returns (see delayq's package doc, A full
// disk), and tockd, which owns the queue, does it.
//
// Why here and not inside delayq: a stopped Queue's memory holds the effect of records the disk
// did not take, so coming back means rebuilding the state from the disk, which Open does and the
// kill -9 tests exercise round after round. A Queue rebuilding itself in place would be a second
// recovery path to keep in step with every piece of state the Queue gains, in the code where a
// mistake loses data; a fresh Queue from Open shares nothing with the stopped one. The owner of
// the Queue is also the one that knows what to answer meanwhile: here, 503 to every request.

// Reopening backoff: the first try is made this long after the outage began, each further one
// twice as long after the one before, up to reopenMaxWait. An outage that begins within
// reopenCalm of the end of the one before goes on from the wait that one had reached, so that a
// disk that takes writes only now and then does not make the queue flap.
const (
	reopenFirstWait = 100 * time.Millisecond
	reopenMaxWait   = 5 * time.Second
	reopenCalm      = time.Minute
)

// probeSize is how much a try writes and syncs in the directory before opening the queue: an
// Open needs not write, so it succeeds on a full disk, and the queue would stop again at once.
const probeSize = 256 << 10

// watchInterval is how often a reopening asks its queue whether it is stopped, so that an outage
// met by no call (a failed checkpoint write in the background) begins, and is logged, within it.
const watchInterval = time.Second

// A reopening is the embedded engine as tockd serves it: a delayq.Queue that, once a full or
// failing disk has stopped it, is closed and opened again from its directory, with a backoff,
// until an Open succeeds. Meanwhile every call fails with an error matching queue.ErrUnavailable,
// which the server answers 503; the calls in flight when the disk failed get the queue's own
// error, which matches it too. The outage's start and end are logged, and counted in its
// Metrics. Nothing acknowledged is lost: Open recovers what was durable.
//
// A reopening is safe for concurrent use.
type reopening struct {
	dir  string
	open func() (*delayq.Queue, error)
	log  *slog.Logger
	done chan struct{} // closed by Close
	bg   sync.WaitGroup

	mu       sync.Mutex
	q        *delayq.Queue // nil during an outage
	cause    error         // what stopped the queue, during an outage
	since    time.Time     // the outage's start
	outages  uint64
	downtime time.Duration // of the outages ended
	ended    time.Time     // when the last outage ended
	wait     time.Duration // the backoff the last outage reached
	closed   bool
}

var (
	_ queue.Admin    = (*reopening)(nil)
	_ queue.Limiter  = (*reopening)(nil)
	_ queue.Reporter = (*reopening)(nil)
)

// newReopening serves the queue q, in dir, opened by open, which it calls again to reopen it.
func newReopening(q *delayq.Queue, dir string, open func() (*delayq.Queue, error), log *slog.Logger) *reopening {
	r := &reopening{dir: dir, open: open, log: log, q: q, done: make(chan struct{})}
	r.bg.Add(1)
	go r.watch()
	return r
}

// current returns the queue, or the error to answer while there is none.
func (r *reopening) current() (*delayq.Queue, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		return nil, fmt.Errorf("tockd: %w", queue.ErrClosed)
	case r.q == nil:
		return nil, r.outageLocked()
	}
	return r.q, nil
}

// outageLocked returns the error of a call during an outage: unavailable, with the outage's
// cause, or the last Open's error, in its chain.
func (r *reopening) outageLocked() error {
	return fmt.Errorf("tockd: %w while the queue is reopened: %w", queue.ErrUnavailable, r.cause)
}

// after returns err, the error of a call to q, as the caller should see it, and begins an outage
// when it says that q stopped. A Receive that was waiting on q when the outage began gets q's
// failure, or ErrClosed if q was closed first: the latter is given as unavailable too.
func (r *reopening) after(q *delayq.Queue, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, queue.ErrUnavailable):
		r.stopped(q, err)
	case errors.Is(err, queue.ErrClosed):
		r.mu.Lock()
		defer r.mu.Unlock()
		switch {
		case r.closed || r.q == q:
		case r.q == nil:
			return r.outageLocked()
		default:
			return fmt.Errorf("tockd: %w: the queue was reopened during the call", queue.ErrUnavailable)
		}
	}
	return err
}

// stopped begins an outage, if q is the queue being served and none has begun: it stops serving
// q, and reopens the directory in the background.
func (r *reopening) stopped(q *delayq.Queue, cause error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.q != q || r.closed {
		return
	}
	r.q, r.cause, r.since = nil, cause, time.Now()
	r.outages++
	if r.since.Sub(r.ended) > reopenCalm || r.wait == 0 {
		r.wait = reopenFirstWait
	}
	r.log.Error("queue unavailable: the disk failed a write or sync; reopening the queue once it takes writes again",
		"err", cause, "outage", r.outages)
	r.bg.Add(1)
	go r.reopen(q)
}

// reopen closes q, which stopped, and opens the directory again once it takes a write, until an
// Open succeeds or Close begins.
func (r *reopening) reopen(q *delayq.Queue) {
	defer r.bg.Done()
	if err := q.Close(); err != nil {
		r.log.Debug("closing the stopped queue", "err", err)
	}
	r.mu.Lock()
	wait := r.wait
	r.mu.Unlock()
	t := time.NewTimer(wait)
	defer t.Stop()
	for tries := 1; ; tries++ {
		select {
		case <-t.C:
		case <-r.done:
			return
		}
		err := probe(r.dir)
		var nq *delayq.Queue
		if err == nil {
			nq, err = r.open()
		}
		if err != nil {
			r.mu.Lock()
			if err.Error() != r.cause.Error() {
				r.log.Warn("the queue cannot be reopened yet; trying again", "err", err, "tries", tries)
			}
			r.cause = err
			r.mu.Unlock()
			wait = min(2*wait, reopenMaxWait)
			t.Reset(wait)
			continue
		}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			_ = nq.Close()
			return
		}
		took := time.Since(r.since)
		r.q, r.cause, r.wait, r.ended = nq, nil, wait, time.Now()
		r.downtime += took
		r.mu.Unlock()
		r.log.Info("queue available again: reopened after the disk failure", "took", took.Round(time.Millisecond), "tries", tries)
		return
	}
}

// probe writes probeSize bytes to a file in dir, syncs them and removes the file: whether the
// disk takes writes.
func probe(dir string) (err error) {
	f, err := os.CreateTemp(dir, "reopen-probe-*")
	if err != nil {
		return err
	}
	defer func() {
		f.Close()
		if rerr := os.Remove(f.Name()); err == nil {
			err = rerr
		}
	}()
	if _, err := f.Write(make([]byte, probeSize)); err != nil {
		return err
	}
	return f.Sync()
}

// watch asks the queue served whether it stopped, every watchInterval until Close.
func (r *reopening) watch() {
	defer r.bg.Done()
	t := time.NewTicker(watchInterval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-r.done:
			return
		}
		if q, err := r.current(); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), watchInterval)
			r.after(q, q.Ready(ctx))
			cancel()
		}
	}
}

// Close stops reopening and closes the queue. During an outage there is no queue to close: it
// returns the outage's cause.
func (r *reopening) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return fmt.Errorf("tockd: %w", queue.ErrClosed)
	}
	r.closed = true
	close(r.done)
	r.mu.Unlock()
	r.bg.Wait()
	r.mu.Lock()
	q, cause := r.q, r.cause
	r.mu.Unlock()
	if q == nil {
		return fmt.Errorf("tockd: the queue was unavailable at shutdown: %w", cause)
	}
	return q.Close()
}

// Metrics returns the queue's metrics, when there is one, and those of the outages.
func (r *reopening) Metrics(ctx context.Context) ([]queue.Metric, error) {
	r.mu.Lock()
	q, outages, down := r.q, r.outages, r.downtime
	out := 0.0
	if q == nil {
		out = 1
		down += time.Since(r.since)
	}
	r.mu.Unlock()
	ms := []queue.Metric{
		{Name: "store_outages_total", Kind: queue.Counter, Value: float64(outages),
			Help: "Times a full or failing disk stopped the embedded queue (tockd reopens it once the disk takes writes again)."},
		{Name: "store_unavailable", Kind: queue.Gauge, Value: out,
			Help: "1 while the embedded queue is stopped by a full or failing disk and tockd is reopening it, else 0."},
		{Name: "store_unavailable_seconds_total", Kind: queue.Counter, Value: down.Seconds(),
			Help: "Time the embedded queue has been stopped by a full or failing disk, over all outages."},
	}
	if q == nil {
		return ms, nil
	}
	qms, err := q.Metrics(ctx)
	return append(qms, ms...), r.after(q, err)
}

// call calls f with the queue, and gives its error as after does.
func call[T any](r *reopening, f func(*delayq.Queue) (T, error)) (T, error) {
	q, err := r.current()
	if err != nil {
		var zero T
		return zero, err
	}
	v, err := f(q)
	return v, r.after(q, err)
}

// do is call for a method that returns only an error.
func do(r *reopening, f func(*delayq.Queue) error) error {
	_, err := call(r, func(q *delayq.Queue) (struct{}, error) { return struct{}{}, f(q) })
	return err
}

func (r *reopening) Put(ctx context.Context, m queue.Message) (string, error) {
	return call(r, func(q *delayq.Queue) (string, error) { return q.Put(ctx, m) })
}

func (r *reopening) PutBatch(ctx context.Context, ms []queue.Message) ([]string, error) {
	return call(r, func(q *delayq.Queue) ([]string, error) { return q.PutBatch(ctx, ms) })
}

func (r *reopening) Cancel(ctx context.Context, id string) (bool, error) {
	return call(r, func(q *delayq.Queue) (bool, error) { return q.Cancel(ctx, id) })
}

func (r *reopening) Receive(ctx context.Context, topic string, max int, visibility time.Duration) ([]queue.Delivery, error) {
	return call(r, func(q *delayq.Queue) ([]queue.Delivery, error) { return q.Receive(ctx, topic, max, visibility) })
}

func (r *reopening) Ack(ctx context.Context, receipts ...string) error {
	return do(r, func(q *delayq.Queue) error { return q.Ack(ctx, receipts...) })
}

func (r *reopening) Nack(ctx context.Context, receipt string, delay time.Duration, opts ...queue.NackOption) error {
	return do(r, func(q *delayq.Queue) error { return q.Nack(ctx, receipt, delay, opts...) })
}

func (r *reopening) Extend(ctx context.Context, receipt string, visibility time.Duration) error {
	return do(r, func(q *delayq.Queue) error { return q.Extend(ctx, receipt, visibility) })
}

func (r *reopening) Stats(ctx context.Context) (queue.Stats, error) {
	return call(r, func(q *delayq.Queue) (queue.Stats, error) { return q.Stats(ctx) })
}

func (r *reopening) DueCounts(ctx context.Context, from time.Time, step time.Duration, n int) ([]int, error) {
	return call(r, func(q *delayq.Queue) ([]int, error) { return q.DueCounts(ctx, from, step, n) })
}

func (r *reopening) Ready(ctx context.Context) error {
	return do(r, func(q *delayq.Queue) error { return q.Ready(ctx) })
}

func (r *reopening) Topics(ctx context.Context) ([]queue.TopicInfo, error) {
	return call(r, func(q *delayq.Queue) ([]queue.TopicInfo, error) { return q.Topics(ctx) })
}

func (r *reopening) Messages(ctx context.Context, topic string, state queue.State, cursor string, limit int) ([]queue.MessageInfo, string, error) {
	var next string
	page, err := call(r, func(q *delayq.Queue) (page []queue.MessageInfo, err error) {
		page, next, err = q.Messages(ctx, topic, state, cursor, limit)
		return page, err
	})
	return page, next, err
}

func (r *reopening) Message(ctx context.Context, id string) (queue.MessageInfo, error) {
	return call(r, func(q *delayq.Queue) (queue.MessageInfo, error) { return q.Message(ctx, id) })
}

func (r *reopening) DeliverNow(ctx context.Context, id string) (bool, error) {
	return call(r, func(q *delayq.Queue) (bool, error) { return q.DeliverNow(ctx, id) })
}

func (r *reopening) Requeue(ctx context.Context, topic string, ids ...string) (int, error) {
	return call(r, func(q *delayq.Queue) (int, error) { return q.Requeue(ctx, topic, ids...) })
}

func (r *reopening) Purge(ctx context.Context, topic string, state queue.State) (int, error) {
	return call(r, func(q *delayq.Queue) (int, error) { return q.Purge(ctx, topic, state) })
}

func (r *reopening) Pause(ctx context.Context, topic string) error {
	return do(r, func(q *delayq.Queue) error { return q.Pause(ctx, topic) })
}

func (r *reopening) Resume(ctx context.Context, topic string) error {
	return do(r, func(q *delayq.Queue) error { return q.Resume(ctx, topic) })
}

func (r *reopening) SetLimit(ctx context.Context, topic string, l queue.Limit) error {
	return do(r, func(q *delayq.Queue) error { return q.SetLimit(ctx, topic, l) })
}

func (r *reopening) Limits(ctx context.Context) ([]queue.TopicLimit, error) {
	return call(r, func(q *delayq.Queue) ([]queue.TopicLimit, error) { return q.Limits(ctx) })
}
