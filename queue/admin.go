package queue

import (
	"context"
	"time"
)

// An Admin is an [Engine] that an operator can inspect and act on: which topics it holds and how
// many messages each has in each [State], the messages themselves a page at a time without
// consuming them, and actions on them (deliver now, requeue dead letters, purge, pause). Both of
// tock's engines implement it; the server's /v1/topics routes, the CLI and the status page use it.
//
// Every action is durable as a Put is, and takes effect for every process serving the engine's
// storage. Reading (Topics, Messages, Message) changes nothing: no lease is taken, no attempt
// counted.
type Admin interface {
	Engine

	// Topics lists every topic that holds a message in any state, or is paused, with its counts,
	// in the order of their names.
	Topics(ctx context.Context) ([]TopicInfo, error)

	// Messages returns up to limit messages of topic in state, and a cursor for the next page (""
	// when there is none). Scheduled messages come in the order of their due time; due ones, the
	// order Receive would lease them in; leased ones, by lease deadline; dead letters, by the time
	// they died. A cursor is opaque and stays valid however the topic changes: a page may then
	// miss messages that moved, or show one again, but never fails. Payloads are cut to
	// PreviewLen bytes (MessageInfo.Size says how long they are). limit must be from 1 to
	// MaxPage (ErrInvalid otherwise). Engines read a page's worth at a time: paging through a
	// topic of any size costs memory for one page.
	Messages(ctx context.Context, topic string, state State, cursor string, limit int) (page []MessageInfo, next string, err error)

	// Message returns the waiting message id, its payload whole. It fails with ErrNotFound when no
	// message with that ID is waiting (the same condition under which Cancel reports false).
	Message(ctx context.Context, id string) (MessageInfo, error)

	// DeliverNow makes the scheduled message id due at once and reports whether it did: false
	// when no message with that ID is scheduled (it is due already, leased, a dead letter, or not
	// waiting at all).
	DeliverNow(ctx context.Context, id string) (bool, error)

	// Requeue moves dead letters of topic back onto topic, due at once, with their attempts
	// counted from zero again, and returns how many it moved: those with the given IDs, or every
	// dead letter of the topic when ids is empty. An ID that names no dead letter of topic is
	// skipped. A dead letter that a consumer of the dead-letter topic has leased is moved too; its
	// receipt becomes stale.
	Requeue(ctx context.Context, topic string, ids ...string) (int, error)

	// Purge removes every message of topic in state and returns how many it removed. state is
	// Scheduled, Due or Dead (ErrInvalid otherwise: leased messages belong to their consumers).
	// Removed messages are done as if cancelled.
	Purge(ctx context.Context, topic string, state State) (int, error)

	// Pause stops deliveries of topic: Receive on it waits, as it would on an empty topic, until
	// Resume. Puts go on, messages fall due, and leases already given run their course. A pause
	// lasts until Resume, across restarts of the engine. Pausing a paused topic does nothing.
	Pause(ctx context.Context, topic string) error

	// Resume ends a pause of topic; waiting Receive calls are served at once. Resuming a topic
	// that is not paused does nothing.
	Resume(ctx context.Context, topic string) error
}

// A State is where a message is in its life.
type State string

// The states of a message.
const (
	// Scheduled: waiting for its due time.
	Scheduled State = "scheduled"
	// Due: due, waiting for a consumer (a paused topic's due messages stay due).
	Due State = "due"
	// Leased: delivered to a consumer, neither acked, nacked nor expired.
	Leased State = "leased"
	// Dead: moved to the dead-letter topic after the maximum number of failed deliveries, and not
	// yet received from it, cancelled or requeued. A dead letter is listed under the topic it died
	// on, not under the dead-letter topic, where it is due like any message.
	Dead State = "dead"
)

// Valid reports whether s is one of the four states.
func (s State) Valid() bool {
	return s == Scheduled || s == Due || s == Leased || s == Dead
}

// Paging bounds of [Admin.Messages].
const (
	// MaxPage is the most messages one page holds.
	MaxPage = 1000
	// PreviewLen is how much of a payload a page shows.
	PreviewLen = 256
)

// TopicInfo is what [Admin.Topics] reports of one topic.
type TopicInfo struct {
	Topic string
	// Scheduled, Due and Leased count the topic's messages in each state; Dead counts the dead
	// letters that died on this topic and wait on its dead-letter topic.
	Scheduled, Due, Leased, Dead int64
	// OldestDue is the due time of the topic's earliest due message, zero when none is due: how
	// long the topic's consumers are behind.
	OldestDue time.Time
	// Paused reports a topic paused by [Admin.Pause].
	Paused bool
	// Puts, Deliveries, Acks and Nacks count the topic's messages put, delivered (redeliveries
	// included), acked and nacked. They only grow, for as long as the engine keeps them (each
	// engine says how long); rates are their differences over time.
	Puts, Deliveries, Acks, Nacks uint64
	// CountsSince is when the engine began these counts, if it starts them again (the embedded
	// engine does for a topic it forgot while it held nothing): a later CountsSince than seen
	// before says they restarted from zero. Zero when the engine never restarts them.
	CountsSince time.Time
}

// MessageInfo is what [Admin.Messages] and [Admin.Message] report of one message.
type MessageInfo struct {
	ID string
	// Topic is the topic the message was put on; for a dead letter, the topic it died on.
	Topic string
	State State
	// DeliverAt is when the message is or was due: for a dead letter, when it last was.
	DeliverAt time.Time
	// Attempts counts its deliveries so far.
	Attempts int
	// LastFailure says how the last delivery failed, where the engine knows: "nacked", "lease
	// expired", or "dead-lettered" (nacked with [WithDeadLetter]); FailedAt says when, and Reason
	// gives the reason the Nack gave ([WithReason]). All are empty for a message that has not
	// failed, and Reason for one whose last failure gave none.
	LastFailure string
	FailedAt    time.Time
	Reason      string
	// LeaseDeadline is when the lease of a leased message runs out.
	LeaseDeadline time.Time
	// Payload is the payload, whole from Message and cut to PreviewLen bytes in a page; Size is
	// its whole length.
	Payload []byte
	Size    int
	// Headers are the message's headers, whole in a page too (they are bounded by
	// MaxHeadersSize); nil when it has none.
	Headers map[string]string
}
