package api

import (
	"encoding/json"
	"time"
)

// TopicsResponse is the answer of [RouteTopics]: every topic that holds a message in any state,
// or is paused, in the order of their names. Topics is empty, not null, when there is none.
type TopicsResponse struct {
	Topics []Topic `json:"topics"`
}

// Topic is what [RouteTopics] reports of one topic.
type Topic struct {
	Topic string `json:"topic"`
	// Scheduled, Due and Leased count the topic's messages in each state (the words of
	// [MessageInfo.State]); Dead counts the dead letters that died on this topic and wait on its
	// dead-letter topic.
	Scheduled int64 `json:"scheduled"`
	Due       int64 `json:"due"`
	Leased    int64 `json:"leased"`
	Dead      int64 `json:"dead"`
	// OldestDue is the due time of the topic's earliest due message, absent when none is due: how
	// far behind the topic's consumers are.
	OldestDue time.Time `json:"oldest_due,omitzero"`
	// Paused reports a topic paused by [RoutePause] until [RouteResume].
	Paused bool `json:"paused"`
	// Puts, Deliveries and Acks are the engine's counts of the topic's messages put, delivered
	// (redeliveries included) and acked. They only grow while the engine keeps them; an engine
	// that restarts, or forgets an idle topic, starts them from zero again.
	Puts       uint64 `json:"puts"`
	Deliveries uint64 `json:"deliveries"`
	Acks       uint64 `json:"acks"`
	// Rate is how fast those counts grew recently.
	Rate Rate `json:"rate"`
	// Limit is the topic's delivery limit, absent when it has none (or the engine has no limits).
	Limit *Limit `json:"limit,omitempty"`
}

// Rate is the growth of a topic's counts, per second, over about the last minute: the server
// samples the engine's counts when the topics are asked for and divides the growth since its
// oldest sample of the last minute by the time between them. It is zero the first time a topic
// is seen and after its counts restarted from zero.
type Rate struct {
	Puts       float64 `json:"puts"`
	Deliveries float64 `json:"deliveries"`
	Acks       float64 `json:"acks"`
}

// The states of a message, the values of [MessageInfo.State] and of the query parameter
// [QueryState] of [RouteMessages].
const (
	StateScheduled = "scheduled" // waiting for its due time
	StateDue       = "due"       // due, waiting for a consumer
	StateLeased    = "leased"    // delivered, neither acked, nacked nor expired
	StateDead      = "dead"      // a dead letter, listed under the topic it died on
)

// Query parameters of [RouteMessages]: the state listed (required), the cursor of the page (the
// Next of the previous page; absent for the first) and the most messages in the page (from 1 to
// [MaxPage], default [DefaultPage]).
const (
	QueryState  = "state"
	QueryCursor = "cursor"
	QueryLimit  = "limit"
)

// Page sizes of [RouteMessages]; MaxPage and PreviewLen are those of the engines' contract
// (queue.MaxPage, queue.PreviewLen).
const (
	DefaultPage = 50
	MaxPage     = 1000
	// PreviewLen is the most bytes of a payload a [MessageInfo] of a page shows.
	PreviewLen = 256
)

// MessagesResponse is the answer of [RouteMessages]: one page of a topic's messages in one state,
// and the cursor of the next page, absent on the last. Messages is empty, not null, when there is
// none. Scheduled messages come in the order of their due time, due ones in the order a receive
// would lease them, leased ones by lease deadline, dead letters by the time they died. A cursor
// stays valid however the topic changes: the next page may then miss a message that moved, or
// show one again.
type MessagesResponse struct {
	Messages []MessageInfo `json:"messages"`
	Next     string        `json:"next,omitempty"`
}

// MessageInfo describes a waiting message without consuming it: an item of [MessagesResponse],
// and, with its Payload, the answer of [RouteMessage].
type MessageInfo struct {
	ID string `json:"id"`
	// Topic is the topic the message was put on; for a dead letter, the topic it died on.
	Topic string `json:"topic"`
	// State is one of the State constants.
	State string `json:"state"`
	// DeliverAt is when the message is or was due: for a dead letter, when it last was.
	DeliverAt time.Time `json:"deliver_at"`
	// Attempts counts its deliveries so far.
	Attempts int `json:"attempts"`
	// LastFailure says how its last delivery failed, where the engine knows ("nacked", "lease
	// expired", or "dead-lettered": failed for good by its consumer), FailedAt when, and Reason
	// the reason the consumer gave ([NackRequest].Reason); all are absent for a message that has
	// not failed, and Reason for a failure that gave none.
	LastFailure string    `json:"last_failure,omitempty"`
	FailedAt    time.Time `json:"failed_at,omitzero"`
	Reason      string    `json:"reason,omitempty"`
	// LeaseDeadline is when the lease of a leased message runs out; absent for the others.
	LeaseDeadline time.Time `json:"lease_deadline,omitzero"`
	// Size is the payload's length in bytes.
	Size int `json:"size"`
	// Preview is the payload's first [PreviewLen] bytes as text, any invalid UTF-8 replaced by
	// U+FFFD, and Truncated says whether the payload is longer.
	Preview   string `json:"preview"`
	Truncated bool   `json:"truncated,omitempty"`
	// Payload, in the answer of [RouteMessage] only, is the whole payload as the JSON value it was
	// put as: null for none, and a JSON string for a payload put through the Go API that is not
	// JSON.
	Payload json.RawMessage `json:"payload,omitempty"`
	// Headers are the message's headers, whole in a page too; absent when it has none.
	Headers map[string]string `json:"headers,omitempty"`
}

// MovedResponse is the answer of [RouteDeliver] and [RouteRequeue]: how many messages were moved.
type MovedResponse struct {
	Moved int `json:"moved"`
}

// RequeueRequest is the body of [RouteRequeue]: the dead letters of the topic to send back onto
// it, due at once and with their attempts counted from zero again. Give either IDs, the dead
// letters named (an ID that names none is skipped), or All, every dead letter of the topic; a
// request with neither, or both, is refused, so that an empty body never requeues everything.
type RequeueRequest struct {
	IDs []string `json:"ids,omitempty"`
	All bool     `json:"all,omitempty"`
}

// PurgeRequest is the body of [RoutePurge]: the state whose messages to remove, [StateScheduled],
// [StateDue] or [StateDead] (leased messages belong to their consumers). Removed messages are done
// as if cancelled.
type PurgeRequest struct {
	State string `json:"state"`
}

// PurgeResponse is the answer of [RoutePurge]: how many messages were removed.
type PurgeResponse struct {
	Removed int `json:"removed"`
}

// PauseResponse is the answer of [RoutePause] and [RouteResume]: the topic and whether it is now
// paused.
type PauseResponse struct {
	Topic  string `json:"topic"`
	Paused bool   `json:"paused"`
}
