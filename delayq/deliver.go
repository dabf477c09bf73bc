package delayq

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tockwheel/tock"
	"github.com/tockwheel/tock/delayq/internal/wal"
)

// An entry is a message in memory: loaded from the disk wheel, or put straight into the near
// window. Its fields are guarded by Queue.mu.
type entry struct {
	pos    wal.Pos // its current Put record
	origin wal.Pos // its first Put record (equal to pos unless rolled); names it in memory

	id, topic string
	payload   []byte
	deliverAt int64  // Unix nanoseconds
	attempt   uint32 // failed deliveries so far

	// topicChanged: topic is a dead-letter topic, not the one in the record at pos.
	topicChanged bool
	// userID: id was chosen by the producer, so the entry is in state.byID.
	userID bool

	st    entryState
	lease uint64 // number of the current or last lease; receipts carry it

	// bucket is the timer bucket the entry waits in (waiting: until due; leased: until the lease
	// ends), or nil. prev and next link it into its bucket, or into its topic's ready list.
	bucket     *bucket
	prev, next *entry
}

// entryState is where an entry is in delivery.
type entryState uint8

const (
	// waiting: deliverAt is in the future; its bucket's timer makes it ready.
	waiting entryState = iota
	// ready: due, in its topic's ready list, waiting for Receive.
	ready
	// leased: handed to a consumer by Receive; its bucket's timer ends the lease.
	leased
)

// A bucket holds the entries whose timer ends in one millisecond, so that a million messages due
// in one second cost a thousand timers on the wheel, not a million, and each callback moves a
// whole bucket under one lock. A bucket fires at the end of its millisecond: never early.
type bucket struct {
	key  int64 // Unix milliseconds, rounded up: the bucket fires at key ms
	head *entry
	n    int
	// waiting counts the entries that become due when the bucket fires (the others are leases
	// running out), for DueCounts. An entry's state does not change while it is in a bucket.
	waiting int
	timer   tock.Timer
}

const bucketNs = int64(time.Millisecond)

// A topicQueue holds a topic's ready entries, oldest first, and wakes Receive calls.
type topicQueue struct {
	head, tail *entry
	n          int
	// signal is closed (and replaced) when entries become ready; nil when nobody waits.
	signal  chan struct{}
	waiters int // Receive calls waiting on signal
}

// insertLocked adds a loaded message to the indexes and reports whether it did: false means a
// message with the same origin is in memory already (a duplicate rolled copy), and e was dropped.
// The caller pins e's record for a true result, and arms it.
func (q *Queue) insertLocked(e *entry) bool {
	s := &q.state
	if s.byOrigin[e.origin] != nil {
		return false
	}
	s.byOrigin[e.origin] = e
	if !isGenerated(e.id, e.origin) {
		e.userID = true
		s.byID[e.id] = e
	}
	return true
}

// lookupLocked returns the message in memory with the given ID, or nil.
func (q *Queue) lookupLocked(id string) *entry {
	if e := q.state.byID[id]; e != nil {
		return e
	}
	if _, origin, ok := parseID(id); ok {
		if e := q.state.byOrigin[origin]; e != nil && e.id == id {
			return e
		}
	}
	return nil
}

// removeLocked forgets e: acked, cancelled or found done. It releases its record's pin.
func (q *Queue) removeLocked(e *entry) {
	s := &q.state
	q.unscheduleLocked(e)
	switch e.st {
	case ready:
		q.unlinkReadyLocked(e)
	case leased:
		s.leased--
	}
	delete(s.byOrigin, e.origin)
	if e.userID && s.byID[e.id] == e {
		delete(s.byID, e.id)
	}
	q.unpinLocked(e.pos)
}

func (q *Queue) unpinLocked(p wal.Pos) {
	s := &q.state
	seg := p.Segment()
	if s.pins[seg]--; s.pins[seg] <= 0 {
		delete(s.pins, seg)
	}
}

// armLocked makes e, which is not ready, leased or scheduled, ready at its deliverAt: now if that
// has passed, else when its bucket fires.
func (q *Queue) armLocked(e *entry) {
	e.st = waiting
	if e.deliverAt <= time.Now().UnixNano() {
		q.readyLocked(e)
		return
	}
	q.scheduleLocked(e, e.deliverAt)
}

// scheduleLocked puts e in the bucket of the millisecond that ends at or after at.
func (q *Queue) scheduleLocked(e *entry, at int64) {
	key := at / bucketNs
	if at%bucketNs > 0 {
		key++
	}
	b := q.state.buckets[key]
	if b == nil {
		b = &bucket{key: key}
		t, err := q.wheel.AtFunc(time.UnixMilli(key), func() { q.fire(b) })
		if err != nil {
			// The wheel is stopped: the queue is closing, and the message is handled after Open.
			return
		}
		b.timer = t
		q.state.buckets[key] = b
	}
	e.bucket, e.prev, e.next = b, nil, b.head
	if b.head != nil {
		b.head.prev = e
	}
	b.head = e
	b.n++
	if e.st == waiting {
		b.waiting++
	}
}

// unscheduleLocked takes e out of its bucket, if any, stopping the bucket's timer when it empties.
func (q *Queue) unscheduleLocked(e *entry) {
	b := e.bucket
	if b == nil {
		return
	}
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		b.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	}
	e.bucket, e.prev, e.next = nil, nil, nil
	if e.st == waiting {
		b.waiting--
	}
	if b.n--; b.n == 0 {
		b.timer.Stop()
		delete(q.state.buckets, b.key)
	}
}

// fire is a bucket's timer callback: its messages came due, or their leases ran out.
func (q *Queue) fire(b *bucket) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state.buckets[b.key] != b || q.usableLocked() != nil {
		return // emptied and replaced, or closing
	}
	delete(q.state.buckets, b.key)
	for e := b.head; e != nil; {
		next := e.next
		e.bucket, e.prev, e.next = nil, nil, nil
		switch e.st {
		case waiting:
			q.readyLocked(e)
		case leased:
			q.state.leased--
			q.stats.expired++
			if _, err := q.retryLocked(e, 0, true); err != nil {
				q.failLocked(err)
			}
		}
		e = next
	}
}

// readyLocked moves e to its topic's ready list and wakes a Receive waiting on the topic.
func (q *Queue) readyLocked(e *entry) {
	e.st = ready
	tq := q.topicLocked(e.topic)
	e.prev, e.next = tq.tail, nil
	if tq.tail != nil {
		tq.tail.next = e
	} else {
		tq.head = e
	}
	tq.tail = e
	tq.n++
	q.state.ready++
	if e.attempt == 0 {
		q.stats.lateness.add(time.Duration(time.Now().UnixNano() - e.deliverAt))
	}
	if tq.signal != nil {
		close(tq.signal)
		tq.signal = nil
	}
}

func (q *Queue) unlinkReadyLocked(e *entry) {
	tq := q.state.topics[e.topic]
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		tq.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		tq.tail = e.prev
	}
	e.prev, e.next = nil, nil
	tq.n--
	q.state.ready--
	q.dropIdleTopicLocked(e.topic, tq)
}

// dropIdleTopicLocked forgets topic when it has no ready message and no waiting Receive, so that
// Receive calls on ever new topic names (an HTTP client can make any number) keep no memory.
func (q *Queue) dropIdleTopicLocked(topic string, tq *topicQueue) {
	if tq.n == 0 && tq.waiters == 0 && q.state.topics[topic] == tq {
		delete(q.state.topics, topic)
	}
}

func (q *Queue) topicLocked(topic string) *topicQueue {
	tq := q.state.topics[topic]
	if tq == nil {
		tq = &topicQueue{}
		q.state.topics[topic] = tq
	}
	return tq
}

// Receive leases up to max due messages of topic, oldest due first, blocking until at least one
// is due, ctx ends (it returns ctx.Err()) or the queue closes (ErrClosed). Each message stays
// leased for the visibility timeout: Ack it within that time, or it is due again after a backoff
// and its delivery counts as failed. Messages are delivered at least once: a crash, an expired
// lease or a lost ack means a message can be delivered again. max and visibility must be positive.
func (q *Queue) Receive(ctx context.Context, topic string, max int, visibility time.Duration) ([]Delivery, error) {
	if max < 1 || visibility <= 0 {
		return nil, fmt.Errorf("%w: Receive max %d, visibility %v", ErrInvalid, max, visibility)
	}
	for {
		q.mu.Lock()
		if err := q.usableLocked(); err != nil {
			q.mu.Unlock()
			return nil, err
		}
		tq := q.topicLocked(topic)
		if tq.n > 0 {
			ds := make([]Delivery, 0, min(max, tq.n))
			for tq.head != nil && len(ds) < max {
				e := tq.head
				q.unlinkReadyLocked(e)
				ds = append(ds, q.leaseLocked(e, visibility))
			}
			q.mu.Unlock()
			return ds, nil
		}
		if tq.signal == nil {
			tq.signal = make(chan struct{})
		}
		sig := tq.signal
		tq.waiters++
		q.mu.Unlock()
		var err error
		select {
		case <-sig:
		case <-ctx.Done():
			err = ctx.Err()
		case <-q.closed:
			err = ErrClosed
		}
		q.mu.Lock()
		tq.waiters--
		q.dropIdleTopicLocked(topic, tq)
		q.mu.Unlock()
		if err != nil {
			return nil, err
		}
	}
}

// leaseLocked hands a ready e to a consumer until visibility from now.
func (q *Queue) leaseLocked(e *entry, visibility time.Duration) Delivery {
	e.st = leased
	q.state.leaseSeq++
	e.lease = q.state.leaseSeq
	q.scheduleLocked(e, after(time.Now().UnixNano(), visibility))
	q.state.leased++
	q.stats.delivered++
	return Delivery{
		Message: Message{ID: e.id, Topic: e.topic, Payload: bytes.Clone(e.payload), DeliverAt: time.Unix(0, e.deliverAt)},
		Receipt: makeReceipt(e.origin, e.lease),
		Attempt: int(e.attempt) + 1,
	}
}

// leasedLocked returns the entry a receipt names if it is leased under that receipt. A message
// whose lease ran out but which was not leased again still counts, so a slow consumer's ack is not
// wasted.
func (q *Queue) leasedLocked(receipt string) (*entry, error) {
	origin, lease, ok := parseReceipt(receipt)
	if !ok {
		return nil, fmt.Errorf("%w: malformed receipt %q", ErrUnknownReceipt, receipt)
	}
	e := q.state.byOrigin[origin]
	if e == nil || e.lease != lease || lease == 0 {
		return nil, fmt.Errorf("%w: %s", ErrUnknownReceipt, receipt)
	}
	return e, nil
}

// Ack ends the leases the receipts name: their messages are done and never delivered again. It
// acks every receipt it can and returns an error matching ErrUnknownReceipt for the others. When
// it returns, the acks are durable (unless NoSync). An ack of a message whose visibility timeout
// ran out is accepted as long as no other Receive has leased it since.
func (q *Queue) Ack(ctx context.Context, receipts ...string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := q.waitRoom(); err != nil {
		return err
	}
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return err
	}
	var errs []error
	var end wal.Pos
	for _, r := range receipts {
		e, err := q.leasedLocked(r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		_, end, err = q.log.Append(&wal.Record{Kind: wal.KindAck, Target: e.origin})
		if err != nil {
			q.failLocked(err)
			q.mu.Unlock()
			return err
		}
		q.removeLocked(e)
		q.stats.acked++
	}
	q.mu.Unlock()
	if end != 0 {
		if err := q.waitDurable(end); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// Nack ends a lease early: the delivery counts as failed and the message is due again after delay
// (at once if delay <= 0), or moves to the dead-letter topic if it has failed the maximum number
// of times. It returns an error matching ErrUnknownReceipt if the receipt names no current lease.
func (q *Queue) Nack(ctx context.Context, receipt string, delay time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := q.waitRoom(); err != nil {
		return err
	}
	q.mu.Lock()
	if err := q.usableLocked(); err != nil {
		q.mu.Unlock()
		return err
	}
	e, err := q.leasedLocked(receipt)
	if err == nil && e.st != leased {
		err = fmt.Errorf("%w: lease already over: %s", ErrUnknownReceipt, receipt)
	}
	if err != nil {
		q.mu.Unlock()
		return err
	}
	q.unscheduleLocked(e)
	q.state.leased--
	q.stats.nacked++
	end, err := q.retryLocked(e, max(delay, 0), false)
	if err != nil {
		q.failLocked(err)
	}
	q.mu.Unlock()
	if err != nil {
		return err
	}
	return q.waitDurable(end)
}

// retryLocked records a failed delivery of e, which is no longer leased or scheduled: it is due again after
// delay (or the backoff, when useBackoff), or moves to its dead-letter topic. The Update record is
// appended; the caller decides whether to wait for it.
func (q *Queue) retryLocked(e *entry, delay time.Duration, useBackoff bool) (wal.Pos, error) {
	e.attempt++
	now := time.Now().UnixNano()
	rec := wal.Record{Kind: wal.KindUpdate, Target: e.origin}
	dead := q.cfg.maxAttempts > 0 && int(e.attempt) >= q.cfg.maxAttempts
	switch {
	case dead && !q.isDeadLetterTopic(e.topic):
		e.topic = q.cfg.deadLetterTopic(e.topic)
		e.topicChanged = true
		e.attempt = 0
		e.deliverAt = now
		rec.Topic = e.topic
		q.stats.deadLettered++
	case dead:
		e.deliverAt = after(now, q.cfg.backoffMax)
	case useBackoff:
		e.deliverAt = after(now, q.cfg.backoff(e.attempt))
	default:
		e.deliverAt = after(now, delay)
	}
	rec.DeliverAt, rec.Attempt = e.deliverAt, e.attempt
	_, end, err := q.log.Append(&rec)
	if err != nil {
		return 0, err
	}
	q.armLocked(e)
	return end, nil
}

// after returns d (>= 0) after now, in Unix nanoseconds, no later than the latest DeliverAt Put
// accepts: a sum past the int64 range would wrap around to a time long past, making a message due
// at once instead of in centuries.
func after(now int64, d time.Duration) int64 {
	if limit := maxDeliverAt.UnixNano(); int64(d) > limit-now {
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
