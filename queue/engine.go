package queue

import (
	"context"
	"time"
)

// An Engine keeps delayed messages and delivers them when due. Implementations MUST be safe for
// concurrent use by any number of goroutines, and MUST keep the promises in the package
// documentation. Methods that take a context return, when it ends first, an error wrapping the
// context's error.
type Engine interface {
	// Put stores m and returns its ID: m.ID when set, else one the engine generates, which no
	// other message of the engine has. Once Put returns nil the message MUST be delivered at or
	// after its due time (the later of m.DeliverAt and the time of the Put) unless it is
	// cancelled.
	//
	// When m.ID names a message that is still waiting (scheduled, due or leased), Put stores
	// nothing: it returns m.ID and nil if the waiting message has the same topic, payload and
	// DeliverAt (a retried Put; headers are not compared, and the waiting message keeps its
	// own), and an error matching ErrDuplicate otherwise, unless m.Replace
	// asks to replace it (see [Message.Replace]). Two DeliverAt times that have both come by the
	// engine's clock at the repeated Put, the zero time included, are the same: both mean due at
	// the Put, and the retry of a Put due at once (a server's, which resolves "now" on each
	// request) may carry another. An ID is free again
	// once its message is acked or cancelled. A dead letter keeps its ID: it waits on the
	// dead-letter topic until it is received and acked, or cancelled.
	//
	// Put refuses with ErrInvalid an empty topic, a DeliverAt after MaxDeliverAt or headers that
	// [CheckHeaders] refuses as invalid, and with ErrTooLarge a payload over the engine's limit
	// (the payload's bytes and [HeadersSize] together) or headers over their bounds.
	Put(ctx context.Context, m Message) (id string, err error)

	// PutBatch stores every message of ms or none of them, and returns their IDs in order. Each
	// message is checked as by Put; a chosen ID that repeats within ms is refused with ErrInvalid.
	// A batch is a retried Put for each message only when every message is one; otherwise a
	// waiting chosen ID fails the whole batch with ErrDuplicate. Replacing is Put's: a batch
	// holding a message with Replace set and a chosen ID is refused with ErrInvalid, unless that
	// message is alone in it, which an engine may replace as Put does.
	PutBatch(ctx context.Context, ms []Message) (ids []string, err error)

	// Cancel removes the waiting message id and reports whether it did. False with a nil error
	// means no message with that ID is waiting: never put, already acked or cancelled. A leased
	// message can be cancelled, and so can a dead letter.
	Cancel(ctx context.Context, id string) (bool, error)

	// Receive waits until at least one message of topic is due, then leases up to max due messages
	// for visibility and returns them, earliest due first. When ctx ends first it returns no
	// deliveries and an error wrapping ctx's error. max and visibility must be positive
	// (ErrInvalid otherwise).
	Receive(ctx context.Context, topic string, max int, visibility time.Duration) ([]Delivery, error)

	// Ack ends the leases the receipts name: their messages are done and never delivered again.
	// It returns nil when every receipt was acked, including a receipt whose message is already
	// done (acked or cancelled): acking is idempotent. It returns an *AckError listing the receipts
	// it could not ack, matching ErrUnknownReceipt, when some name no current lease (forged,
	// malformed, or stale: the message was leased to another consumer since); the others were
	// acked. Any other error leaves the outcome of each receipt unknown; repeating the Ack is safe.
	// An ack of a message whose lease ran out is accepted as long as no other Receive has leased
	// it since.
	Ack(ctx context.Context, receipts ...string) error

	// Nack ends the lease receipt names and makes its message due again after delay (zero: at
	// once), counting a failed delivery: after the engine's maximum, the message moves to the
	// dead-letter topic instead. A receipt that names no current lease is refused with
	// ErrUnknownReceipt. delay must not be negative.
	//
	// The options say more of the failure: [WithReason] gives the reason the message's last
	// failure reports ([MessageInfo].Reason), and [WithDeadLetter] fails the message for good: it
	// moves to the dead-letter topic at once, whatever its attempts. Engines read them with
	// [NackOptionsOf], and refuse what it refuses with ErrInvalid. A nil option is ignored.
	Nack(ctx context.Context, receipt string, delay time.Duration, opts ...NackOption) error

	// Extend moves the end of the lease receipt names to visibility from the call, longer or
	// shorter than it was, so that a consumer can hold a message for as long as its work takes.
	// A receipt that names no current lease (forged, malformed, stale, or whose lease ran out or
	// was ended by an Ack or Nack) is refused with ErrUnknownReceipt, and nothing changes.
	// visibility must be positive (ErrInvalid otherwise). Extend counts no attempt.
	Extend(ctx context.Context, receipt string, visibility time.Duration) error

	// Stats reports the engine's counts. It is called on every metrics scrape and status poll,
	// so it must be cheap.
	Stats(ctx context.Context) (Stats, error)

	// DueCounts returns how many scheduled messages fall due in each of n consecutive steps from
	// from on: counts[i] is the number due in [from + i·step, from + (i+1)·step). Each engine
	// documents how exact the counts are. It returns nil when n or step is not positive.
	DueCounts(ctx context.Context, from time.Time, step time.Duration, n int) ([]int, error)

	// Ready returns nil when the engine can serve requests now, and an error saying why not
	// otherwise (ErrClosed after Close; ErrUnavailable while its storage is unreachable).
	Ready(ctx context.Context) error

	// Close releases the engine's resources. Receive calls that are waiting return ErrClosed, and
	// so does every later call, Close included. Messages leased and not acked are delivered again
	// (by another engine on the same storage, or by this one after it is opened again).
	Close() error
}

// Stats is an engine's view of its contents.
type Stats struct {
	// Scheduled counts messages waiting for their due time.
	Scheduled int64
	// Due counts messages due and waiting for a consumer, dead letters included.
	Due int64
	// Leased counts messages delivered and neither acked, nacked nor expired.
	Leased int64
	// Lateness summarises how long after their due time recent messages became available to
	// Receive. It measures the engine, not the consumers: time a due message waits for a Receive is
	// not in it.
	Lateness Lateness
}

// Lateness summarises how late messages became available to Receive.
type Lateness struct {
	// P50, P99 and Max summarise recent messages (each engine says how many).
	P50, P99, Max time.Duration
	// Count and Sum cover every message that fell due since the engine started: their number and
	// the total of their lateness, so that a Prometheus summary can be exported from them.
	Count uint64
	Sum   time.Duration
}

// A Reporter is an Engine with measurements of its own beyond [Stats], such as the embedded
// engine's fsync times or the Redis engine's script latencies. The server exports each [Metric] it
// reports under /metrics, named tock_ and the metric's name.
type Reporter interface {
	Metrics(ctx context.Context) ([]Metric, error)
}

// A Metric is one measurement a [Reporter] reports, in the shape of a Prometheus metric.
type Metric struct {
	// Name is the metric's name without the tock_ prefix, in snake case and ending in its unit or
	// _total: "fsync_duration_seconds", "corrupt_records_total".
	Name string
	// Help says what it measures, in one sentence.
	Help string
	// Kind is what the metric is; it says which of the fields below hold its value.
	Kind MetricKind
	// Value is a Counter's or a Gauge's value.
	Value float64
	// Count, Sum and Buckets are a Histogram's: Buckets are cumulative and in increasing order of
	// UpperBound, and observations above the last bound are counted only in Count.
	Count   uint64
	Sum     float64
	Buckets []Bucket
}

// A MetricKind says what a [Metric] is.
type MetricKind int

// The kinds of metric.
const (
	Counter MetricKind = iota + 1
	Gauge
	Histogram
)

// A Bucket is one bucket of a histogram: Count observations were at most UpperBound.
type Bucket struct {
	UpperBound float64
	Count      uint64
}
