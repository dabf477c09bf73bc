package server

import (
	"context"
	"errors"
	"time"

	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/queue"
)

// DelayqEngine returns q as a [queue.Engine] for [New]. Closing the engine closes q.
//
// It is temporary, until delayq implements queue.Engine itself, and as small as it can be: it
// converts the message types and maps delayq's errors onto queue's sentinels, and adds nothing.
// Where delayq falls short of the contract, so does the engine: a payload over the limit is
// queue.ErrInvalid rather than queue.ErrTooLarge (the server checks its own limit first and
// answers 413).
// The engine is a [queue.Reporter] of the log's fsync times.
func DelayqEngine(q *delayq.Queue) queue.Engine { return delayqEngine{q} }

type delayqEngine struct{ q *delayq.Queue }

func (e delayqEngine) Put(ctx context.Context, m queue.Message) (string, error) {
	id, err := e.q.Put(ctx, delayq.Message(m))
	return id, fromDelayq(err)
}

func (e delayqEngine) PutBatch(ctx context.Context, ms []queue.Message) ([]string, error) {
	dm := make([]delayq.Message, len(ms))
	for i, m := range ms {
		dm[i] = delayq.Message(m)
	}
	ids, err := e.q.PutBatch(ctx, dm)
	return ids, fromDelayq(err)
}

func (e delayqEngine) Cancel(ctx context.Context, id string) (bool, error) {
	ok, err := e.q.Cancel(ctx, id)
	return ok, fromDelayq(err)
}

func (e delayqEngine) Receive(ctx context.Context, topic string, max int, visibility time.Duration) ([]queue.Delivery, error) {
	ds, err := e.q.Receive(ctx, topic, max, visibility)
	out := make([]queue.Delivery, len(ds))
	for i, d := range ds {
		out[i] = queue.Delivery{Message: queue.Message(d.Message), Receipt: d.Receipt, Attempt: d.Attempt}
	}
	return out, fromDelayq(err)
}

// Ack converts delayq's per-receipt outcome to queue's.
func (e delayqEngine) Ack(ctx context.Context, receipts ...string) error {
	err := e.q.Ack(ctx, receipts...)
	var de *delayq.AckError
	if !errors.As(err, &de) {
		return fromDelayq(err)
	}
	ae := &queue.AckError{Failed: make([]queue.ReceiptError, len(de.Failed))}
	for i, f := range de.Failed {
		ae.Failed[i] = queue.ReceiptError{Receipt: f.Receipt, Err: fromDelayq(f.Err)}
	}
	return ae
}

func (e delayqEngine) Nack(ctx context.Context, receipt string, delay time.Duration) error {
	return fromDelayq(e.q.Nack(ctx, receipt, delay))
}

func (e delayqEngine) Stats(ctx context.Context) (queue.Stats, error) {
	st := e.q.Stats()
	return queue.Stats{
		Scheduled: st.Pending,
		Due:       int64(st.Due),
		Leased:    int64(st.Leased),
		Lateness:  queue.Lateness{P50: st.Lateness.P50, P99: st.Lateness.P99, Max: st.Lateness.Max},
	}, nil
}

// DueCounts comes from the queue's own per-slot counts, so it covers every scheduled message, those
// put before a restart included (see delayq.Queue.DueCounts for what it approximates).
func (e delayqEngine) DueCounts(ctx context.Context, from time.Time, step time.Duration, n int) ([]int, error) {
	return e.q.DueCounts(from, step, n), nil
}

// Ready acks no receipts: delayq checks that it is open and has not stopped on a failure before it
// looks at the receipts.
func (e delayqEngine) Ready(ctx context.Context) error {
	err := e.q.Ack(ctx)
	switch {
	case err == nil, errors.Is(err, delayq.ErrClosed), ctx.Err() != nil:
		return fromDelayq(err)
	}
	return &classified{kind: queue.ErrUnavailable, err: err}
}

func (e delayqEngine) Close() error { return fromDelayq(e.q.Close()) }

// Metrics reports the log's fsyncs as a histogram, tock_fsync_duration_seconds under /metrics.
func (e delayqEngine) Metrics(ctx context.Context) ([]queue.Metric, error) {
	st := e.q.Stats().Syncs
	m := queue.Metric{
		Name: "fsync_duration_seconds",
		Help: "Latency of the queue's fsyncs: one per group commit of durable writes (none with -nosync), one per full log segment.",
		Kind: queue.Histogram, Count: st.Count, Sum: seconds(st.Total),
		Buckets: make([]queue.Bucket, len(st.Buckets)),
	}
	for i, b := range st.Buckets {
		m.Buckets[i] = queue.Bucket{UpperBound: seconds(b.UpperBound), Count: b.Count}
	}
	return []queue.Metric{m}, nil
}

// fromDelayq marks delayq's errors with queue's sentinel of the same meaning, keeping delayq's
// message and its error chain.
func fromDelayq(err error) error {
	var kind error
	var dup *delayq.DuplicateError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &dup):
		return &queue.DuplicateError{ID: dup.ID, DeliverAt: dup.DeliverAt}
	case errors.Is(err, delayq.ErrInvalid):
		kind = queue.ErrInvalid
	case errors.Is(err, delayq.ErrUnknownReceipt):
		kind = queue.ErrUnknownReceipt
	case errors.Is(err, delayq.ErrClosed):
		kind = queue.ErrClosed
	default:
		return err
	}
	return &classified{kind: kind, err: err}
}

// classified is err marked with kind, one of queue's sentinels: it reads
// as err, unwraps to err and matches kind too.
type classified struct{ kind, err error }

func (e *classified) Error() string        { return e.err.Error() }
func (e *classified) Unwrap() error        { return e.err }
func (e *classified) Is(target error) bool { return target == e.kind }
