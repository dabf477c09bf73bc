package queue

import (
	"fmt"
	"time"
)

// A Message is what producers put: a payload for a topic, to be delivered at DeliverAt.
type Message struct {
	// ID names the message for Cancel. Leave it empty to have the engine generate one. A chosen ID
	// is unique among waiting messages: see [Engine.Put].
	ID string
	// Topic is the name consumers receive by. It must not be empty.
	Topic string
	// Payload is delivered as it is. It may be empty.
	Payload []byte
	// Headers are pairs of strings delivered with the message, as those of NATS, Kafka or AMQP:
	// metadata such as a trace context ("traceparent") or a content type, which the engine keeps
	// and never reads. Nil or empty means none; deliveries carry nil then. [CheckHeaders] says
	// what keys and values are valid; there are at most [MaxHeaders] of them and
	// [MaxHeadersSize] bytes, and their bytes count in the engine's payload limit with the
	// payload's. Headers are not compared when a Put repeats a waiting message's ID: a retried
	// Put with other headers (another trace, say) is still a retried Put, and the waiting
	// message keeps its own.
	Headers map[string]string
	// DeliverAt is when the message becomes due. The zero time, or any time before the Put, means
	// at the Put. Times after [MaxDeliverAt] are refused. A monotonic clock reading, if any, is
	// ignored: due times are wall-clock times.
	DeliverAt time.Time
	// Replace makes a Put with a chosen ID replace the message waiting under that ID, atomically,
	// with this one (new topic, payload, headers and due time, attempts counted from zero), instead of
	// failing with ErrDuplicate: a debounce ("remind me 30 minutes after the last change") in
	// one call. A leased message is not replaced: the Put fails with a *DuplicateError whose
	// Leased field is set. A scheduled, due or dead message is replaced. Without a waiting
	// message, the Put stores m as any Put does. It is ignored for a generated ID.
	Replace bool
}

// A Delivery is a message leased to one consumer by [Engine.Receive].
type Delivery struct {
	// Message is the message as it was put, except that DeliverAt is the time it became due: the
	// later of the DeliverAt it was put with and the time of its Put, or the time a Nack or an
	// expired lease made it due again.
	Message
	// Receipt names this lease for Ack and Nack. It is opaque, cannot be guessed, and is valid
	// until the lease ends.
	Receipt string
	// Attempt counts deliveries of the message, 1 the first time.
	Attempt int
}

// DeadLetterSuffix is appended to a topic's name to name the topic its dead letters go to, unless
// an engine is configured otherwise.
const DeadLetterSuffix = ".dead"

// MaxDeliverAt returns the latest due time an engine accepts: the start of the year 2262. Due times
// are kept as Unix nanoseconds, which end in April 2262; the months between leave engines room for
// backoffs and lease deadlines past any due time without overflow.
func MaxDeliverAt() time.Time { return time.Date(2262, 1, 1, 0, 0, 0, 0, time.UTC) }

// DueAt returns when a message put at now with the given DeliverAt falls due: the later of the two.
// A deliverAt after [MaxDeliverAt] is refused with an error matching [ErrInvalid]. Engines use it
// so that every engine, and the server that echoes the due time, agree.
func DueAt(deliverAt, now time.Time) (time.Time, error) {
	if deliverAt.After(MaxDeliverAt()) {
		return time.Time{}, fmt.Errorf("deliver_at %s is after %s, the latest time accepted: %w",
			deliverAt.UTC().Format(time.RFC3339), MaxDeliverAt().Format(time.RFC3339), ErrInvalid)
	}
	if deliverAt.Before(now) {
		deliverAt = now
	}
	return deliverAt.Round(0), nil
}
