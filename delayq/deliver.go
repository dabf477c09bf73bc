package delayq

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/tockwheel/tock/delayq/internal/format"
	"github.com/tockwheel/tock/delayq/internal/wal"
	"github.com/tockwheel/tock/queue"
)

// fire is a bucket's timer callback: its messages came due, or their leases ran out.
func (q *Queue) fire(b *bucket) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.usableLocked() != nil {
		return // closing
	}
	q.mem.take(b, func(e *entry) {
		switch e.st {
		case waiting:
			q.mem.makeReady(e)
		case leased:
			q.stats.expired++
			q.retryLocked(e, 0, true, queue.NackOptions{})
		}
	})
}

// Receive leases up to max due messages of topic, oldest due first (those already due before a
// restart come back in nearly that order: each is placed by due time among the 64 before it in the
// log), blocking until at least one is due, ctx ends (it returns ctx.Err()) or the queue closes (ErrClosed). On a paused topic (see
// [Queue.Pause]) it waits as on an empty one, until the topic is resumed; on a topic at its limit
// (see [Queue.SetLimit]), until a permit comes. Each message stays
// leased for the visibility timeout: Ack it within that time, or it is due again after a backoff
// and its delivery counts as failed. Messages are delivered at least once: a crash, an expired
// lease or a lost ack means a message can be delivered again. max and visibility must be positive.
func (q *Queue) Receive(ctx context.Context, topic string, max int, visibility time.Duration) ([]Delivery, error) {
	if max < 1 || visibility <= 0 {
		return nil, fmt.Errorf("delayq: Receive max %d, visibility %v: %w", max, visibility, ErrInvalid)
	}
	for {
		q.mu.Lock()
		if err := q.usableLocked(); err != nil {
			q.mu.Unlock()
			return nil, err
		}
		t := q.mem.topics.get(topic)
		if t.ready > 0 && !t.paused {
			now := time.Now().UnixNano()
			if n := q.permitsLocked(t, min(max, t.ready), now); n > 0 {
				ds := make([]Delivery, 0, n)
				deadline := after(now, visibility)
				for t.head != nil && len(ds) < n {
					ds = append(ds, q.leaseLocked(t.head, deadline))
				}
				q.mu.Unlock()
				return ds, nil
			}
		}
		if t.signal == nil {
			t.signal = make(chan struct{})
		}
		sig := t.signal
		t.waiters++
		q.mu.Unlock()
		var err error
		select {
		case <-sig:
		case <-ctx.Done():
			err = fmt.Errorf("delayq: %w", ctx.Err())
		case <-q.closed:
			err = errClosed
		case <-q.stopped: // the loop returns the failure
		}
		q.mu.Lock()
		t.waiters--
		q.mem.topics.release(t)
		q.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
}

// leaseLocked hands e, the head of its topic's ready list, to a consumer until deadline. The lease
// number is random, so that a receipt cannot be guessed from another one (see makeReceipt).
func (q *Queue) leaseLocked(e *entry, deadline int64) Delivery {
	n := q.leaseRand.Uint64()
	for n == 0 {
		n = q.leaseRand.Uint64() // 0 names no lease
	}
	q.mem.lease(e, n, deadline)
	q.stats.delivered++
	e.t.deliveries++
	return Delivery{
		Message: Message{ID: e.id, Topic: e.t.name, Payload: bytes.Clone(e.payload), Headers: maps.Clone(e.headers), DeliverAt: time.Unix(0, e.deliverAt)},
		Receipt: q.makeReceipt(e.origin, e.lease),
		Attempt: int(e.attempt) + 1,
	}
}

// leasedLocked returns the entry a receipt names if it is leased under that receipt. A message
// whose lease ran out but which was not leased again still counts, so a slow consumer's ack is not
// wasted. done reports a receipt the queue issued whose message is no longer waiting: acked,
// cancelled or purged (every message that has been leased stays in memory until it is done). The
// error is the same whether or not a message exists at the position the receipt names.
func (q *Queue) leasedLocked(receipt string) (e *entry, done bool, err error) {
	origin, lease, ok := q.parseReceipt(receipt)
	if !ok {
		return nil, false, errUnknownReceipt
	}
	e = q.mem.byOrigin[origin]
	if e == nil {
		return nil, true, errUnknownReceipt
	}
	if e.lease != lease || lease == 0 {
		return nil, false, errUnknownReceipt
	}
	return e, false, nil
}

// Ack ends the leases the receipts name: their messages are done and never delivered again. When
// it returns, the acks are durable (unless WithNoSync). An ack of a message whose visibility
// timeout ran out is accepted as long as no other Receive has leased it since. Leases do not
// outlive the queue: after a restart, a receipt of a message still waiting is stale.
//
// The outcome is per receipt. Ack acks every receipt it can; when some cannot be acked (they
// match [ErrUnknownReceipt]: malformed, forged, or stale), it returns an [*AckError] listing
// them. A receipt whose message is done already (acked, cancelled or purged) is acked already:
// Ack reports no error for it, so a retried Ack succeeds, before or after a restart. Receipts
// carry a MAC under the directory's secret (see [Open]), so a forged receipt cannot pass for one
// whose message is done.
func (q *Queue) Ack(ctx context.Context, receipts ...string) error {
	if err := q.lockToWrite(ctx); err != nil {
		return err
	}
	var failed []ReceiptError
	var end wal.Pos
	q.awaited = true // waitDurable below commits the records
	for _, r := range receipts {
		e, done, err := q.leasedLocked(r)
		if err != nil {
			if done {
				end = max(end, q.log.End()) // done; durable once the log is here
				continue
			}
			failed = append(failed, ReceiptError{Receipt: r, Err: err})
			continue
		}
		q.stats.acked++
		e.t.acks++ // before the ack forgets e, and maybe its topic
		if end, err = q.commitLocked(&format.Record{Kind: format.KindAck, Target: e.origin}, nil); err != nil {
			q.awaited = false
			q.mu.Unlock()
			return err
		}
	}
	q.awaited = false
	q.mu.Unlock()
	if end != 0 {
		if err := q.waitDurable(end); err != nil {
			return err
		}
	}
	if len(failed) > 0 {
		return &AckError{Failed: failed}
	}
	return nil
}

// Nack ends a lease early: the delivery counts as failed and the message is due again after delay
// (at once if delay is 0), or moves to the dead-letter topic if it has failed the maximum number
// of times, or at once with [queue.WithDeadLetter]. A reason given with [queue.WithReason] is
// what [Queue.Message] reports as the message's last failure, until it fails again, is requeued
// or is done; it is written with the failure, in the Update record, and survives restarts. It
// returns an error matching ErrUnknownReceipt if the receipt names no current lease, and one
// matching ErrInvalid for a negative delay or a reason queue.NackOptionsOf refuses.
func (q *Queue) Nack(ctx context.Context, receipt string, delay time.Duration, opts ...queue.NackOption) error {
	if delay < 0 {
		return fmt.Errorf("delayq: Nack delay %v: %w", delay, ErrInvalid)
	}
	o, err := queue.NackOptionsOf(opts)
	if err != nil {
		return fmt.Errorf("delayq: %w", err)
	}
	if err := q.lockToWrite(ctx); err != nil {
		return err
	}
	e, err := q.currentLeaseLocked(receipt)
	if err != nil {
		q.mu.Unlock()
		return err
	}
	q.stats.nacked++
	e.t.nacks++
	end, err := q.retryLocked(e, delay, false, o)
	q.mu.Unlock()
	if err != nil {
		return err
	}
	return q.waitDurable(end)
}

// currentLeaseLocked returns the entry a receipt names if it is leased under that receipt now: not
// acked, nacked, nor run out.
func (q *Queue) currentLeaseLocked(receipt string) (*entry, error) {
	e, _, err := q.leasedLocked(receipt)
	if err == nil && e.st != leased {
		err = errUnknownReceipt
	}
	return e, err
}

// Extend moves the end of the lease receipt names to visibility from now (see
// [queue.Engine.Extend]): the lease's timer moves on the wheel, and nothing is written, since
// leases live in memory and end when the queue closes. It returns an error matching
// ErrUnknownReceipt when the receipt names no current lease (its lease ran out, or was acked or
// nacked), and one matching ErrInvalid for a visibility that is not positive.
func (q *Queue) Extend(ctx context.Context, receipt string, visibility time.Duration) error {
	if visibility <= 0 {
		return fmt.Errorf("delayq: Extend visibility %v: %w", visibility, ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delayq: %w", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.usableLocked(); err != nil {
		return err
	}
	return q.extendLocked(receipt, time.Now().UnixNano(), visibility)
}

var _ queue.BatchExtender = (*Queue)(nil)

// ExtendBatch extends the leases of receipts to visibility from now under one hold of the lock
// (see [queue.BatchExtender]): an Extend each, for the cost of one. When some receipts name no
// current lease it returns an [*ExtendError] listing them; the others were extended.
func (q *Queue) ExtendBatch(ctx context.Context, receipts []string, visibility time.Duration) error {
	if visibility <= 0 {
		return fmt.Errorf("delayq: ExtendBatch visibility %v: %w", visibility, ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("delayq: %w", err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.usableLocked(); err != nil {
		return err
	}
	now := time.Now().UnixNano()
	var failed []ReceiptError
	for _, r := range receipts {
		if err := q.extendLocked(r, now, visibility); err != nil {
			failed = append(failed, ReceiptError{Receipt: r, Err: err})
		}
	}
	if len(failed) > 0 {
		return &ExtendError{Failed: failed}
	}
	return nil
}

// extendLocked moves the end of the lease receipt names to visibility from now (Unix ns).
func (q *Queue) extendLocked(receipt string, now int64, visibility time.Duration) error {
	e, err := q.currentLeaseLocked(receipt)
	if err != nil {
		return err
	}
	if e.bucket != nil && e.bucket.key*bucketNs <= now {
		return errUnknownReceipt // ran out; its bucket's timer has not fired yet
	}
	q.mem.unschedule(e)
	q.mem.schedule(e, after(now, visibility))
	q.stats.extended++
	return nil
}

// retryLocked records a failed delivery of e, leased or with its lease just run out: it is due
// again after delay (or the backoff, when useBackoff), or moves to its dead-letter topic (after its
// last attempt, or at once when o says so). The Update record is appended and applied; the caller
// decides whether to wait for it.
func (q *Queue) retryLocked(e *entry, delay time.Duration, useBackoff bool, o queue.NackOptions) (wal.Pos, error) {
	attempt := e.attempt + 1
	now := time.Now().UnixNano()
	rec := format.Record{Kind: format.KindUpdate, Target: e.origin, Failure: format.FailureNacked, FailedAt: now, Reason: o.Reason}
	switch {
	case useBackoff:
		rec.Failure = format.FailureExpired
	case o.DeadLetter:
		rec.Failure = format.FailureDeadLettered
	}
	dead := o.DeadLetter || q.cfg.maxAttempts > 0 && int(attempt) >= q.cfg.maxAttempts
	diedAfter := e.diedAfter
	switch {
	case dead && !q.isDeadLetterTopic(e.t.name):
		diedAfter = attempt
		rec.Topic = q.cfg.deadLetterTopic(e.t.name)
		rec.DeliverAt, attempt = now, 0
		q.stats.deadLettered++
	case dead:
		rec.DeliverAt = after(now, q.cfg.backoffMax)
	case useBackoff:
		rec.DeliverAt = after(now, q.cfg.backoff(attempt))
	default:
		rec.DeliverAt = after(now, delay)
	}
	rec.Attempt = attempt
	end, err := q.commitLocked(&rec, nil)
	if err == nil {
		e.diedAfter = diedAfter
	}
	return end, err
}

// after returns d (>= 0) after now, in Unix nanoseconds, no later than the latest DeliverAt Put
// accepts: a sum past the int64 range would wrap around to a time long past, making a message due
// at once instead of in centuries.
func after(now int64, d time.Duration) int64 {
	if limit := maxDeliverAtNs; int64(d) > limit-now {
		return limit
	}
	return now + int64(d)
}

func (q *Queue) isDeadLetterTopic(topic string) bool {
	if q.cfg.deadLetter != "" {
		return topic == q.cfg.deadLetter
	}
	return strings.HasSuffix(topic, DefaultDeadLetterSuffix)
}
