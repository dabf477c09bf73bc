package server

import (
	"context"
	"errors"
	"time"

	"github.com/tockwheel/tock/delayq"
)

// QueueStore returns q as a Store. Closing q stays the caller's job.
func QueueStore(q *delayq.Queue) Store { return queueStore{q} }

// queueStore adapts *delayq.Queue to Store: the message types are the same
// fields, and delayq's errors are classified for the HTTP answers.
type queueStore struct{ q *delayq.Queue }

func (s queueStore) Put(ctx context.Context, m Message) (string, error) {
	id, err := s.q.Put(ctx, delayq.Message(m))
	return id, classify(err)
}

func (s queueStore) PutBatch(ctx context.Context, ms []Message) ([]string, error) {
	dm := make([]delayq.Message, len(ms))
	for i, m := range ms {
		dm[i] = delayq.Message(m)
	}
	ids, err := s.q.PutBatch(ctx, dm)
	return ids, classify(err)
}

func (s queueStore) Cancel(ctx context.Context, id string) (bool, error) {
	ok, err := s.q.Cancel(ctx, id)
	return ok, classify(err)
}

func (s queueStore) Receive(ctx context.Context, topic string, max int, visibility time.Duration) ([]Delivery, error) {
	ds, err := s.q.Receive(ctx, topic, max, visibility)
	out := make([]Delivery, len(ds))
	for i, d := range ds {
		out[i] = Delivery{Message: Message(d.Message), Receipt: d.Receipt, Attempt: d.Attempt}
	}
	return out, classify(err)
}

func (s queueStore) Ack(ctx context.Context, receipts ...string) error {
	return classify(s.q.Ack(ctx, receipts...))
}

func (s queueStore) Nack(ctx context.Context, receipt string, delay time.Duration) error {
	return classify(s.q.Nack(ctx, receipt, delay))
}

func (s queueStore) Stats() StoreStats {
	st := s.q.Stats()
	ss := StoreStats{
		Pending: int64(st.Pending),
		Due:     int64(st.Due),
		Leased:  int64(st.Leased),

		LatenessP50: st.Lateness.P50,
		LatenessP99: st.Lateness.P99,
		LatenessMax: st.Lateness.Max,

		Syncs:       st.Syncs.Count,
		SyncTime:    st.Syncs.Total,
		SyncBuckets: make(map[float64]uint64, len(st.Syncs.Buckets)),
	}
	for _, b := range st.Syncs.Buckets {
		ss.SyncBuckets[seconds(b.UpperBound)] = b.Count
	}
	return ss
}

// DueCounts makes the queue a DueCounter: the forecast comes from the
// queue's own per-slot counts, so it covers every pending message, those
// put before a restart or through another Server included.
func (s queueStore) DueCounts(from time.Time, step time.Duration, n int) []int {
	return s.q.DueCounts(from, step, n)
}

// classify marks delayq's errors with the Store error a server answers by,
// keeping delayq's message and its error chain.
func classify(err error) error {
	var kind error
	switch {
	case err == nil:
		return nil
	case errors.Is(err, delayq.ErrInvalid), errors.Is(err, delayq.ErrUnknownReceipt):
		kind = ErrInvalid
	case errors.Is(err, delayq.ErrClosed):
		kind = ErrUnavailable
	default:
		return err
	}
	return &classified{kind: kind, err: err}
}

type classified struct{ kind, err error }

func (e *classified) Error() string   { return e.err.Error() }
func (e *classified) Unwrap() []error { return []error{e.kind, e.err} }
