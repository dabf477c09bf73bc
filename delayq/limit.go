package delayq

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/delayq/internal/wal"
	"github.com/tockwheel/tock/queue"
)

// Delivery limits per topic (queue.Limiter): a token bucket for the rate, and the topic's count of
// leased messages for the concurrency, both decided under the queue's lock by the one process
// that has the directory, so that every consumer of the queue is bound by them. A Receive that
// finds a topic's due messages held back by its limit waits on the topic's signal, as on an empty
// topic; the signal is given by the permit timer (the next token of the rate, a timer on the
// wheel) or by the end of a lease of the topic (ack, nack, expiry, cancel).

var _ queue.Limiter = (*Queue)(nil)

// A limiter is a topic's limit and the state of its rate's bucket. Its fields are guarded by
// Queue.mu.
type limiter struct {
	queue.Limit
	tokens   float64 // the bucket, at most Burst
	refilled int64   // Unix ns of the last refill
	timer    bool    // a permit timer is set for when the next token comes
}

// SetLimit sets the limit of topic's deliveries (see [queue.Limiter.SetLimit]); the zero Limit
// removes it. The limit is a record in the log, durable when SetLimit returns, and is kept in the
// checkpoint, so it lasts across restarts. The bucket of a new rate starts full, with Burst
// tokens (after a restart too).
func (q *Queue) SetLimit(ctx context.Context, topic string, l queue.Limit) error {
	if err := checkTopic(topic); err != nil {
		return err
	}
	l, err := l.Check()
	if err != nil {
		return fmt.Errorf("delayq: %w", err)
	}
	if err := q.lockToWrite(ctx); err != nil {
		return err
	}
	var end wal.Pos
	if t := q.mem.topics[topic]; t != nil && t.limit != nil && t.limit.Limit == l || (t == nil || t.limit == nil) && l.IsZero() {
		end = q.log.End() // as it is already, durably once the log is here
	} else {
		rec := limitRecord(topic, l)
		end, err = q.commitLocked(&rec, nil)
	}
	q.mu.Unlock()
	return q.waitFor(end, err)
}

// limitRecord returns the Limit record that sets topic's limit to l.
func limitRecord(topic string, l queue.Limit) format.Record {
	return format.Record{Kind: format.KindLimit, Topic: topic, Rate: l.Rate, Burst: uint32(l.Burst), Concurrency: uint32(l.Concurrency)}
}

// record returns the limit as the checkpoint keeps it.
func (l *limiter) record(topic string) format.Limit {
	return format.Limit{Topic: topic, Rate: l.Rate, Burst: uint32(l.Burst), Concurrency: uint32(l.Concurrency)}
}

// limitOf returns the limit a checkpoint kept.
func limitOf(l format.Limit) queue.Limit {
	return queue.Limit{Rate: l.Rate, Burst: int(l.Burst), Concurrency: int(l.Concurrency)}
}

// setLimit applies a limit to t (a record's, or the checkpoint's), and wakes its receivers to
// look again. A new rate's bucket starts full.
func (t *topicState) setLimit(l queue.Limit) {
	switch {
	case l.IsZero():
		t.limit = nil
	case t.limit == nil || t.limit.Rate != l.Rate || t.limit.Burst != l.Burst:
		t.limit = &limiter{Limit: l, tokens: float64(l.Burst), refilled: time.Now().UnixNano()}
	default:
		t.limit.Concurrency = l.Concurrency
	}
	t.wake()
}

// Limits returns the limit of every topic that has one, in the order of their names.
func (q *Queue) Limits(ctx context.Context) ([]queue.TopicLimit, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("delayq: %w", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.usableLocked(); err != nil {
		return nil, err
	}
	var out []queue.TopicLimit
	for _, t := range q.mem.topics {
		if t.limit != nil {
			out = append(out, queue.TopicLimit{Topic: t.name, Limit: t.limit.Limit})
		}
	}
	slices.SortFunc(out, func(a, b queue.TopicLimit) int { return cmp.Compare(a.Topic, b.Topic) })
	return out, nil
}

// permitsLocked returns how many of n due messages of t its limit lets a Receive lease at now
// (Unix ns), and takes them from the bucket. When it lets none through for want of a token, it
// sets a timer for when the next one comes, which wakes t's receivers. The leases it permits are
// granted at the same now, so that the leases granted in any span of T are at most the burst and
// the rate times T by their own times, as they are by the bucket's.
func (q *Queue) permitsLocked(t *topicState, n int, now int64) int {
	l := t.limit
	if l == nil {
		return n
	}
	if l.Concurrency > 0 {
		n = min(n, max(l.Concurrency-t.leased, 0))
	}
	if l.Rate == 0 || n == 0 {
		return n
	}
	l.tokens = math.Min(float64(l.Burst), l.tokens+float64(now-l.refilled)*l.Rate/1e9)
	l.refilled = now
	n = min(n, int(l.tokens))
	l.tokens -= float64(n)
	if n == 0 && !l.timer {
		// The next token, rounded up to the nanosecond: never early.
		wait := time.Duration(math.Ceil((1 - l.tokens) / l.Rate * 1e9))
		if _, err := q.wheel.AfterFunc(wait, func() { q.permitTimerFired(t, l) }); err == nil {
			l.timer = true
		}
	}
	return n
}

// permitTimerFired wakes t's receivers: a token came.
func (q *Queue) permitTimerFired(t *topicState, l *limiter) {
	q.mu.Lock()
	defer q.mu.Unlock()
	l.timer = false
	if t.limit == l {
		t.wake()
	}
}
