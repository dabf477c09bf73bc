package server

import (
	"context"
	"errors"
	"time"
)

// Store is the queue a Server serves: the embedded delayq engine today, a
// Redis-backed one later. Its methods mirror those of *delayq.Queue.
//
// Implementations must be safe for concurrent use. Errors that are the
// client's fault must wrap ErrInvalid, ErrNotFound or ErrTooLarge so the
// server answers 4xx; an error wrapping ErrUnavailable is answered with 503;
// any other error is answered with 500 and logged.
type Store interface {
	// Put stores m durably and returns its id (m.ID, or a new one when m.ID
	// is empty). Once Put returns nil, m MUST be delivered after a crash.
	Put(ctx context.Context, m Message) (id string, err error)
	// PutBatch stores all of ms durably or none of them and returns their
	// ids in order.
	PutBatch(ctx context.Context, ms []Message) (ids []string, err error)
	// Cancel removes the pending message id; false means no such message
	// is pending.
	Cancel(ctx context.Context, id string) (bool, error)
	// Receive blocks until at least one message of topic is due or ctx
	// ends, then leases up to max due messages for visibility. When ctx
	// ends first it returns no deliveries and ctx's error.
	Receive(ctx context.Context, topic string, max int, visibility time.Duration) ([]Delivery, error)
	// Ack ends the leases of receipts for good. An unknown or forged
	// receipt is an error wrapping ErrInvalid.
	Ack(ctx context.Context, receipts ...string) error
	// Nack ends the lease of receipt and makes its message due again after
	// delay.
	Nack(ctx context.Context, receipt string, delay time.Duration) error
	// Stats reports the store's counts. It must be cheap: it is called on
	// every metrics scrape and status poll.
	Stats() StoreStats
}

// A Message is what a Store keeps: Payload is delivered on Topic at or
// after DeliverAt.
type Message struct {
	ID, Topic string
	Payload   []byte
	DeliverAt time.Time
}

// A Delivery is a due message leased to one consumer.
type Delivery struct {
	Message
	// Receipt names the lease for Ack and Nack.
	Receipt string
	// Attempt counts deliveries of the message, 1 the first time.
	Attempt int
}

// StoreStats is a Store's view of its contents. Fields a store cannot
// report are left zero.
type StoreStats struct {
	// Pending counts messages not yet due (nor cancelled).
	Pending int64
	// Due counts messages due and waiting for a consumer.
	Due int64
	// Leased counts messages delivered and neither acked nor expired.
	Leased int64
	// LatenessP50, LatenessP99 and LatenessMax summarize recent lateness
	// inside the store: how long after their due time messages became
	// available to Receive, without any wait for a consumer.
	LatenessP50, LatenessP99, LatenessMax time.Duration
	// LatenessCount and LatenessSum count every message whose lateness was
	// measured since the store opened, and their total lateness: the
	// _count and _sum of the tock_due_lateness_seconds summary. A store
	// that does not count them leaves them zero.
	LatenessCount uint64
	LatenessSum   time.Duration
	// Syncs counts the store's fsyncs, SyncTime is their total duration
	// and SyncBuckets maps an upper bound in seconds to the cumulative
	// count of syncs that took at most that long. A store that does not
	// time its syncs leaves SyncBuckets nil and no fsync metric is
	// exported; one that does exports it from the start, zeros included.
	Syncs       uint64
	SyncTime    time.Duration
	SyncBuckets map[float64]uint64
}

// A DueCounter is a Store that can tell how many pending messages fall due
// in each of n steps from a time on. The status page draws it as the wheel;
// for a Store without it the server counts what it was put itself.
type DueCounter interface {
	DueCounts(from time.Time, step time.Duration, n int) []int
}

// Store errors that are the client's fault or the server's state rather
// than a failure. Stores wrap them with %w.
var (
	// ErrInvalid reports a request the store refuses: an unknown or forged
	// receipt, a duplicate id, a time out of range.
	ErrInvalid = errors.New("server: invalid request")
	// ErrNotFound reports that a named message or receipt does not exist.
	ErrNotFound = errors.New("server: not found")
	// ErrTooLarge reports a message or batch over the store's limits.
	ErrTooLarge = errors.New("server: too large")
	// ErrUnavailable reports a store that is closed or closing.
	ErrUnavailable = errors.New("server: store unavailable")
)
