package api

import (
	"encoding/json"
	"time"
)

// TimeFormat is how the API writes and reads times: RFC 3339 with nanoseconds, as
// [time.Time.MarshalJSON] writes them. Answers give times in UTC.
const TimeFormat = time.RFC3339Nano

// PutRequest is the body of [RoutePut], and one message of a [BatchRequest]. With neither Delay
// nor DeliverAt the message is due at once; giving both is refused.
type PutRequest struct {
	// ID names the message; absent, the server generates one.
	ID string `json:"id,omitempty"`
	// Payload is any JSON value, delivered as it is (compacted). Absent or null, the message has
	// no payload and is delivered with a null one.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Delay is a Go duration from the server's now: "10s", "1h30m".
	Delay *string `json:"delay,omitempty"`
	// DeliverAt is a time in [TimeFormat].
	DeliverAt *string `json:"deliver_at,omitempty"`
	// Replace, with an ID, replaces the message waiting under the ID (see queue.Message.Replace)
	// instead of failing with 409; a leased message is not replaced, and the 409 says "leased". A
	// batch refuses it.
	Replace bool `json:"replace,omitempty"`
	// Headers are strings delivered with the message, such as a trace context ("traceparent"):
	// at most [MaxHeaders], their keys and values together at most [MaxHeadersSize] bytes, and
	// counted with the payload in the server's payload limit. A key is 1 to [MaxHeaderKey]
	// characters of an HTTP header's name (letters, digits and !#$%&'*+-.^_`|~), case-sensitive;
	// a value any text without control characters other than tab.
	Headers map[string]string `json:"headers,omitempty"`
}

// Bounds of a message's headers (queue.MaxHeaders, queue.MaxHeaderKey, queue.MaxHeadersSize).
const (
	MaxHeaders     = 64
	MaxHeaderKey   = 128
	MaxHeadersSize = 16 << 10
)

// PutResponse is the answer of [RoutePut]: the message's ID and when it is due, the later of the
// time asked for and the server's now at the put.
type PutResponse struct {
	ID        string    `json:"id"`
	DeliverAt time.Time `json:"deliver_at"`
}

// BatchRequest is the body of [RouteBatch]: messages stored all or none.
type BatchRequest struct {
	Messages []PutRequest `json:"messages"`
}

// BatchResponse is the answer of [RouteBatch]: the IDs of the messages, in order, and when each
// is due, as [PutResponse] gives them.
type BatchResponse struct {
	IDs       []string    `json:"ids"`
	DeliverAt []time.Time `json:"deliver_at"`
}

// ReceiveRequest is the body of [RouteReceive]. Every field is optional, and so is the body.
type ReceiveRequest struct {
	// Max is the most messages to lease.
	Max *int `json:"max,omitempty"`
	// Wait is how long the server may wait for a message to be due (a long poll), a Go
	// duration; absent, it answers at once.
	Wait *string `json:"wait,omitempty"`
	// Visibility is how long the messages are leased, a Go duration.
	Visibility *string `json:"visibility,omitempty"`
}

// ReceiveResponse is the answer of [RouteReceive]; Messages is empty, not null, when nothing was
// due in time.
type ReceiveResponse struct {
	Messages []Delivery `json:"messages"`
}

// A Delivery is a message leased to the consumer that received it.
type Delivery struct {
	ID string `json:"id"`
	// Payload is the payload as it was put: a JSON value, null for none.
	Payload json.RawMessage `json:"payload"`
	// DeliverAt is when the message became due.
	DeliverAt time.Time `json:"deliver_at"`
	// Receipt names this lease for [AckRequest] and [NackRequest].
	Receipt string `json:"receipt"`
	// Attempt counts deliveries of the message, 1 the first time.
	Attempt int `json:"attempt"`
	// Headers are the headers it was put with, absent when it has none.
	Headers map[string]string `json:"headers,omitempty"`
}

// AckRequest is the body of [RouteAck]. See [AckErrorBody] for the answer when some receipts are
// not acked.
type AckRequest struct {
	Receipts []string `json:"receipts"`
}

// NackRequest is the body of [RouteNack]: the message is due again after Delay, a Go duration
// (absent: at once), or, with DeadLetter, moves to its dead-letter topic at once whatever its
// attempts (Delay must then be absent). Reason says why the delivery failed: at most
// [MaxReason] bytes, kept as the message's last failure ([MessageInfo].Reason).
type NackRequest struct {
	Receipt    string  `json:"receipt"`
	Delay      *string `json:"delay,omitempty"`
	Reason     string  `json:"reason,omitempty"`
	DeadLetter bool    `json:"dead_letter,omitempty"`
}

// MaxReason is the longest reason a [NackRequest] may give, in bytes of UTF-8 (queue.MaxReason).
const MaxReason = 1024

// ExtendRequest is the body of [RouteExtend]: the lease of Receipt, or of each of Receipts (one
// of the two, not both), now ends Visibility, a Go duration, after the server's now. A receipt of
// no current lease (its lease ran out, or was acked or nacked) is answered 400 with code
// [CodeUnknownReceipt]: an [ErrorBody] for Receipt, and for Receipts an [ExtendErrorBody] that
// lists those not extended (the others were).
type ExtendRequest struct {
	Receipt    string   `json:"receipt,omitempty"`
	Receipts   []string `json:"receipts,omitempty"`
	Visibility string   `json:"visibility"`
}
