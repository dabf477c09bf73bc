package queuetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/tockwheel/tock/queue"
)

// A Model is a reference model of the contract of package queue ([queue.Engine] and
// [queue.Admin]): what an engine must hold after the calls made so far, and what each call may
// answer. A randomized test makes a call on its engine, then tells the Model the call, what it
// returned and when (a [Span]); the Model checks the answer against the contract, returns an error
// describing any violation, and follows the answer. The Check methods compare what the engine
// reports (Topics, Messages, DueCounts) with what the Model holds. What is specific to one engine
// (its layout, its files, its own invariants) stays with that engine's test.
//
// The Model is exact where the contract is, and no more: a message due within the slack of the
// time of a call may be scheduled or due; a lease whose visibility timeout has passed may have run
// out or not, so its message may be leased still, due again later, or dead, until the engine shows
// which (it delivers the message again, or an Ack or Nack of the lease succeeds or fails); a purge
// may remove such a message, or not. A message in one of these states is never required where
// only one of its possible states would put it, and never refused where any would. Deliveries
// limited by [queue.Limiter] are not modelled: a test that sets limits checks them itself.
//
// A Model is not safe for concurrent use.
type Model struct {
	maxAttempts int
	slack       time.Duration

	msgs   map[string]*entry
	paused map[string]bool
	// done holds the IDs of messages acked, cancelled or purged, until the ID is put again: such a
	// message is never delivered again.
	done map[string]bool
	// receipts holds every receipt ever delivered: what an Ack of it must answer, and its message.
	receipts map[string]receipt
	// history holds what happened to each ID, for the messages of violations.
	history map[string][]string
}

// receipt is what the Model knows of a receipt.
type receipt struct {
	st receiptState
	id string
}

// NewModel returns a Model of an engine that moves a message to the dead letters after
// maxAttempts failed deliveries (0: never), and whose due times and timers may be off by up to
// slack (rounding to milliseconds, a timer that fires at the end of its millisecond).
func NewModel(maxAttempts int, slack time.Duration) *Model {
	return &Model{maxAttempts: maxAttempts, slack: slack, msgs: map[string]*entry{}, paused: map[string]bool{},
		done: map[string]bool{}, receipts: map[string]receipt{}, history: map[string][]string{}}
}

// A Span is the time a call took: it began at Start and returned at End, and the engine acted at
// some instant between the two. In a testing/synctest bubble both are the same instant ([At]).
type Span struct{ Start, End time.Time }

// At returns the Span of a call that took no time.
func At(t time.Time) Span { return Span{t, t} }

// The states a message can be in, as a set: a message whose state is not known for sure has
// several.
type states uint8

const (
	waiting    states = 1 << iota // on its topic, scheduled or due
	leased                        // leased from its topic
	dead                          // a dead letter, on its topic's dead-letter topic, not leased
	deadLeased                    // a dead letter leased from the dead-letter topic
)

// entry is what the Model knows of one message that may still be waiting.
type entry struct {
	id, topic string
	payload   []byte
	asked     time.Time // the DeliverAt it was put with, which a retried Put repeats
	st        states
	// dueMin and dueMax bound when it is (or, for a dead letter, last was) due, in the waiting
	// and dead states.
	dueMin, dueMax time.Time
	failures       int // failed deliveries counted since it was put or requeued
	// unsure says that failures may be one short: a lease may have run out unseen.
	unsure   bool
	receipt  string // the current lease's receipt, in the leased states
	leaseEnd time.Time
	// maybeGone says that a purge may have removed it: it need not be delivered, listed or
	// counted any more.
	maybeGone bool
}

// What an Ack of a receipt must answer.
type receiptState uint8

const (
	receiptCurrent    receiptState = iota // the message's lease: the Ack succeeds
	receiptDone                           // its message is done: the Ack succeeds (idempotent)
	receiptSuperseded                     // its message was leased again since: the Ack fails
	receiptEnded                          // the lease ended otherwise (nack, expiry, requeue): either
	receiptOld                            // of a message done whose ID names a new one: either, and no effect
)

var forever = time.Unix(0, math.MaxInt64)

// note records what happened to id at at.
func (m *Model) note(id string, at Span, format string, args ...any) {
	h := append(m.history[id], at.End.Format("15:04:05.000000")+" "+fmt.Sprintf(format, args...))
	if len(h) > 12 {
		h = h[len(h)-12:]
	}
	m.history[id] = h
}

// fault returns a violation about id, with what happened to it.
func (m *Model) fault(id, format string, args ...any) error {
	return fmt.Errorf("%s (what the model saw of %q: %s)", fmt.Sprintf(format, args...), id, strings.Join(m.history[id], "; "))
}

// The names of the states, for messages.
func (s states) String() string {
	var out []string
	for _, x := range []struct {
		s    states
		name string
	}{{waiting, "waiting"}, {leased, "leased"}, {dead, "dead"}, {deadLeased, "dead and leased"}} {
		if s&x.s != 0 {
			out = append(out, x.name)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return fmt.Sprint(out)
}

func (e *entry) String() string {
	return fmt.Sprintf("%q on %q (%v, due %v to %v, %d failures%s)", e.id, e.topic, e.st,
		e.dueMin.Format(time.RFC3339Nano), e.dueMax.Format(time.RFC3339Nano), e.failures,
		map[bool]string{true: ", maybe purged"}[e.maybeGone])
}

// expire widens the states of the messages whose lease may have run out by at: such a message may
// be due again, after its lease's end, or dead.
func (m *Model) expire(at Span) {
	for _, e := range m.msgs {
		if e.st&(leased|deadLeased) == 0 || e.leaseEnd.After(at.End) {
			continue
		}
		if e.st&(waiting|dead) == 0 {
			e.dueMin, e.dueMax = e.leaseEnd.Add(-m.slack), forever
		} else {
			e.dueMin, e.dueMax = minTime(e.dueMin, e.leaseEnd.Add(-m.slack)), forever
		}
		e.unsure = true
		if e.st&leased != 0 {
			e.st |= waiting
			if m.maxAttempts > 0 && e.failures+1 >= m.maxAttempts {
				e.st |= dead
			}
		}
		if e.st&deadLeased != 0 {
			e.st |= dead
		}
	}
}

// Put checks and follows a Put of msg that returned id and err over at.
func (m *Model) Put(msg queue.Message, id string, err error, at Span) error {
	if msg.Replace && msg.ID != "" {
		return m.replace(msg, id, err, at)
	}
	ids := []string(nil)
	if err == nil {
		ids = []string{id}
	}
	return m.PutBatch([]queue.Message{msg}, ids, err, at)
}

// PutBatch checks and follows a PutBatch of ms that returned ids and err over at.
func (m *Model) PutBatch(ms []queue.Message, ids []string, err error, at Span) error {
	for _, msg := range ms {
		if !msg.Replace || msg.ID == "" {
			continue
		}
		// Replace is Put's: a batch that asks for it is refused, unless it holds that message
		// alone, which an engine may replace as Put does.
		switch {
		case errors.Is(err, queue.ErrInvalid):
			m.expire(at)
			return nil
		case len(ms) == 1:
			id := ""
			if len(ids) == 1 {
				id = ids[0]
			}
			return m.replace(msg, id, err, at)
		case err == nil:
			return fmt.Errorf("PutBatch of %d messages, one asking to replace %q, succeeded: only a message put alone replaces", len(ms), msg.ID)
		default:
			return fmt.Errorf("PutBatch of %d messages, one asking to replace %q: %w", len(ms), msg.ID, err)
		}
	}
	m.expire(at)
	// What each message may be: new, a retried Put, a duplicate, or one of several where the
	// contract or the model leaves it open.
	const (
		isNew = 1 << iota
		isRetry
		isDup
	)
	kinds := make([]int, len(ms))
	repeated := false
	seen := map[string]bool{}
	for i, msg := range ms {
		kinds[i] = isNew
		if msg.ID == "" {
			continue
		}
		repeated = repeated || seen[msg.ID]
		seen[msg.ID] = true
		e := m.msgs[msg.ID]
		if e == nil {
			continue
		}
		same := e.topic == msg.Topic && bytes.Equal(e.payload, msg.Payload)
		switch {
		case same && e.asked.Equal(msg.DeliverAt):
			kinds[i] = isRetry
		case same && !e.asked.After(at.Start) && !msg.DeliverAt.After(at.Start):
			// Both due at once: the same message, whatever past times asked for it.
			kinds[i] = isRetry
		default:
			kinds[i] = isDup
		}
		if e.maybeGone {
			kinds[i] |= isNew
		}
	}
	// The batch fails when a chosen ID repeats in it, or names a different waiting message, or
	// when retried Puts stand beside new messages; it succeeds when all are new, or all retried.
	canFail, canSucceed := repeated, !repeated
	allRetry, allNew, anyDup := true, true, false
	canAllRetry, canAllNew := true, true
	for _, k := range kinds {
		allRetry = allRetry && k == isRetry
		allNew = allNew && k == isNew
		anyDup = anyDup || k == isDup
		canAllRetry = canAllRetry && k&isRetry != 0
		canAllNew = canAllNew && k&isNew != 0
	}
	if anyDup || !canAllRetry && !canAllNew {
		canSucceed = false
	}
	if !allRetry && !allNew {
		canFail = true
	}
	if err != nil {
		if !errors.Is(err, queue.ErrDuplicate) && !errors.Is(err, queue.ErrInvalid) {
			return fmt.Errorf("PutBatch of %d messages: %w", len(ms), err)
		}
		if !canFail {
			return fmt.Errorf("PutBatch of %d messages refused (%v), which the model holds no reason for", len(ms), err)
		}
		var de *queue.DuplicateError
		if errors.As(err, &de) {
			e := m.msgs[de.ID]
			if e == nil {
				return fmt.Errorf("PutBatch refused as a duplicate of %q, which the model does not hold", de.ID)
			}
			if e.st == waiting && !e.maybeGone && (de.DeliverAt.Before(e.dueMin.Add(-m.slack)) || de.DeliverAt.After(e.dueMax.Add(m.slack))) {
				return fmt.Errorf("DuplicateError of %s says it is due %v", e, de.DeliverAt)
			}
			e.maybeGone = false // it is there
		}
		return nil
	}
	if !canSucceed {
		return fmt.Errorf("PutBatch of %d messages succeeded; a chosen ID repeats, names a different waiting message, or is retried beside new ones", len(ms))
	}
	if len(ids) != len(ms) {
		return fmt.Errorf("PutBatch of %d messages returned %d IDs", len(ms), len(ids))
	}
	for i, msg := range ms {
		id := ids[i]
		switch {
		case id == "":
			return fmt.Errorf("PutBatch returned an empty ID")
		case msg.ID != "" && id != msg.ID:
			return fmt.Errorf("Put with ID %q returned %q", msg.ID, id)
		case msg.ID == "" && m.msgs[id] != nil:
			return fmt.Errorf("Put generated the ID %q of a waiting message, %s", id, m.msgs[id])
		}
		e := m.msgs[id]
		switch {
		case e == nil || kinds[i] == isNew:
			m.store(id, msg, at)
		case kinds[i]&isNew != 0:
			// A retry of a message a purge may have removed, or the same message put anew.
			e.st |= waiting
			e.dueMin, e.dueMax, e.maybeGone = minTime(e.dueMin, maxTime(msg.DeliverAt, at.Start)), forever, false
		default:
			e.maybeGone = false // a retried Put: nothing stored
			m.note(id, at, "put again (a retry)")
		}
	}
	return nil
}

// store follows the Put of msg under id over at, a message the engine did not hold: it waits,
// due at the later of msg.DeliverAt and the Put.
func (m *Model) store(id string, msg queue.Message, at Span) {
	if m.done[id] {
		// The ID names a new message: whether a receipt of the old one acks it or nothing is
		// the engine's.
		for r, x := range m.receipts {
			if x.id == id {
				m.receipts[r] = receipt{receiptOld, id}
			}
		}
	}
	delete(m.done, id)
	m.msgs[id] = &entry{id: id, topic: msg.Topic, payload: bytes.Clone(msg.Payload), asked: msg.DeliverAt,
		st: waiting, dueMin: maxTime(msg.DeliverAt, at.Start), dueMax: maxTime(msg.DeliverAt, at.End)}
	m.note(id, at, "put on %q due %v", msg.Topic, maxTime(msg.DeliverAt, at.End).Format("15:04:05.000000"))
}

// replace checks and follows a Put of msg asking to replace the message waiting under its chosen
// ID ([queue.Message.Replace]) that returned id and err over at. A message that is not leased
// (scheduled, due or dead) is replaced: the new one waits, its attempts counted from zero, as if
// the old were cancelled and the new put in the same instant. A leased one is not: the Put must
// fail with a [*queue.DuplicateError] whose Leased is set. A lease that may have run out allows
// either answer; with no message waiting, the Put stores msg as any Put does.
func (m *Model) replace(msg queue.Message, id string, err error, at Span) error {
	m.expire(at)
	e := m.msgs[msg.ID]
	leasedOnly := e != nil && !e.maybeGone && e.st&^(leased|deadLeased) == 0
	if err != nil {
		var de *queue.DuplicateError
		switch {
		case !errors.As(err, &de):
			return fmt.Errorf("Put replacing %q: %w", msg.ID, err)
		case !de.Leased:
			return m.fault(msg.ID, "Put replacing %q refused as a duplicate (%v): Replace replaces any message not leased", msg.ID, err)
		case de.ID != msg.ID:
			return fmt.Errorf("Put replacing %q refused with a DuplicateError of %q", msg.ID, de.ID)
		case e == nil || e.st&(leased|deadLeased) == 0:
			return m.fault(msg.ID, "Put replacing %q refused as leased, which the model holds no lease of", msg.ID)
		}
		e.maybeGone = false // it is there, leased
		m.note(msg.ID, at, "not replaced: leased")
		return nil
	}
	switch {
	case id != msg.ID:
		return fmt.Errorf("Put with ID %q returned %q", msg.ID, id)
	case leasedOnly:
		return m.fault(msg.ID, "Put replaced %s, which is leased", e)
	case e != nil:
		m.note(msg.ID, at, "replaced")
		m.finish(e)
	}
	m.store(msg.ID, msg, at)
	return nil
}

// Cancel checks and follows a Cancel of id that returned ok and err over at.
func (m *Model) Cancel(id string, ok bool, err error, at Span) error {
	m.expire(at)
	if err != nil && !errors.Is(err, queue.ErrInvalid) {
		return fmt.Errorf("Cancel(%q): %w", id, err)
	}
	e := m.msgs[id]
	switch {
	case e == nil && ok:
		return m.fault(id, "Cancel(%q) = true: no such message is waiting", id)
	case e == nil:
		return nil
	case !ok && !e.maybeGone:
		return m.fault(id, "Cancel(%q) = false for a waiting message, %s", id, e)
	}
	m.note(id, at, "cancelled")
	m.finish(e)
	return nil
}

// finish forgets e, which is done: acked, cancelled or purged. An Ack of any of its receipts now
// succeeds, a stale one included: acking a done message is idempotent.
func (m *Model) finish(e *entry) {
	for r, x := range m.receipts {
		if x.id == e.id && x.st != receiptOld {
			m.receipts[r] = receipt{receiptDone, e.id}
		}
	}
	delete(m.msgs, e.id)
	m.done[e.id] = true
}

// Receive checks and follows a Receive from topic of at most max messages, with visibility, that
// returned ds and err over at.
func (m *Model) Receive(topic string, max int, visibility time.Duration, ds []queue.Delivery, err error, at Span) error {
	m.expire(at)
	if err != nil {
		if len(ds) > 0 {
			return fmt.Errorf("Receive(%q) returned %d deliveries and an error: %v", topic, len(ds), err)
		}
		if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
			return nil
		}
		return fmt.Errorf("Receive(%q): %w", topic, err)
	}
	if len(ds) == 0 || len(ds) > max {
		return fmt.Errorf("Receive(%q, max %d) returned %d deliveries", topic, max, len(ds))
	}
	if m.paused[topic] {
		return fmt.Errorf("Receive of paused topic %q delivered %d messages", topic, len(ds))
	}
	home, fromDead := topic, false
	if h, ok := cutSuffix(topic, queue.DeadLetterSuffix); ok {
		home, fromDead = h, true
	}
	got := map[string]bool{}
	for _, d := range ds {
		e := m.msgs[d.ID]
		switch {
		case m.done[d.ID]:
			return m.fault(d.ID, "Receive(%q) delivered %q, which was acked, cancelled or purged", topic, d.ID)
		case e == nil:
			return fmt.Errorf("Receive(%q) delivered %q, which was never put", topic, d.ID)
		case got[d.ID]:
			return fmt.Errorf("Receive(%q) delivered %q twice in one call", topic, d.ID)
		case d.Topic != topic || e.topic != home:
			return fmt.Errorf("Receive(%q) delivered %s with topic %q", topic, e, d.Topic)
		case d.Receipt == "" || d.Attempt < 1:
			return fmt.Errorf("Receive(%q) delivered %q with receipt %q, attempt %d", topic, d.ID, d.Receipt, d.Attempt)
		}
		got[d.ID] = true
		from := waiting
		if fromDead {
			from = dead
		}
		if e.st&from == 0 {
			return m.fault(d.ID, "Receive(%q) delivered %s", topic, e)
		}
		if e.dueMin.After(at.End.Add(m.slack)) {
			return m.fault(d.ID, "Receive(%q) delivered %s by %v: early", topic, e, at.End.Format(time.RFC3339Nano))
		}
		if e.st == from && e.dueMax != forever && (d.DeliverAt.Before(e.dueMin.Add(-m.slack)) || d.DeliverAt.After(e.dueMax.Add(m.slack))) {
			return m.fault(d.ID, "Receive(%q) delivered %s saying it was due %v", topic, e, d.DeliverAt.Format(time.RFC3339Nano))
		}
		if !fromDead && e.st == waiting && !e.unsure && d.Attempt != e.failures+1 {
			return m.fault(d.ID, "Receive(%q) delivered %s as attempt %d", topic, e, d.Attempt)
		}
		if _, ok := m.receipts[d.Receipt]; ok {
			return fmt.Errorf("Receive(%q) delivered %q with a receipt given before", topic, d.ID)
		}
		for r, x := range m.receipts {
			if x.id == d.ID && x.st != receiptDone && x.st != receiptOld {
				m.receipts[r] = receipt{receiptSuperseded, d.ID}
			}
		}
		m.receipts[d.Receipt] = receipt{receiptCurrent, d.ID}
		m.note(d.ID, at, "delivered from %q as attempt %d, receipt #%s", topic, d.Attempt, tail(d.Receipt))
		e.st, e.receipt, e.leaseEnd, e.maybeGone, e.unsure = leased, d.Receipt, at.Start.Add(visibility), false, false
		if fromDead {
			e.st = deadLeased
		}
		e.failures = d.Attempt - 1
	}
	return nil
}

// Ack checks and follows an Ack of receipts that returned err over at.
func (m *Model) Ack(receipts []string, err error, at Span) error {
	m.expire(at)
	failed := map[string]bool{}
	if err != nil {
		var ae *queue.AckError
		if !errors.As(err, &ae) {
			return fmt.Errorf("Ack: %w", err)
		}
		for _, f := range ae.Failed {
			if !errors.Is(f.Err, queue.ErrUnknownReceipt) {
				return fmt.Errorf("Ack of %q: %w", f.Receipt, f.Err)
			}
			failed[f.Receipt] = true
		}
	}
	for _, r := range receipts {
		x, known := m.receipts[r]
		e := m.leaseOf(r)
		switch {
		case !known && !failed[r]:
			return fmt.Errorf("Ack of %q, never delivered, succeeded", r)
		case !known:
		case e != nil && e.st&^(leased|deadLeased) == 0:
			if failed[r] {
				return m.fault(e.id, "Ack of the lease of %s failed", e)
			}
			m.note(e.id, at, "acked with #%s", tail(r))
			m.finish(e)
		case e != nil && failed[r]:
			m.ranOut(e)
		case e != nil:
			m.note(e.id, at, "acked with #%s (its lease may have run out)", tail(r))
			m.finish(e) // a lease that ran out, acked before the engine noticed
		case x.st == receiptDone && failed[r]:
			return m.fault(x.id, "Ack of #%s of %q, which is done, failed: acking is idempotent", tail(r), x.id)
		case x.st == receiptSuperseded && !failed[r]:
			// Only a message that is done acks a stale receipt: one a purge may have removed.
			e := m.msgs[x.id]
			if e == nil || !e.maybeGone {
				return m.fault(x.id, "Ack of #%s of %q succeeded, though the message was leased again since", tail(r), x.id)
			}
			m.note(e.id, at, "gone: an Ack of the stale #%s succeeded", tail(r))
			m.finish(e)
		case x.st == receiptEnded && !failed[r]:
			// A lease that ended (it ran out, or the engine lost it) acked before another
			// lease: the message is done.
			if e := m.msgs[x.id]; e != nil && e.receipt == "" {
				m.note(e.id, at, "acked with #%s, whose lease had ended", tail(r))
				m.finish(e)
			}
			m.receipts[r] = receipt{receiptDone, x.id}
		}
	}
	return nil
}

// ranOut follows a lease of e that ran out, which the engine shows it noticed (it refused the
// receipt): a failed delivery was counted, and the message is waiting or dead.
func (m *Model) ranOut(e *entry) {
	m.history[e.id] = append(m.history[e.id], "its lease #"+tail(e.receipt)+" ran out (the engine refused it)")
	m.receipts[e.receipt] = receipt{receiptEnded, e.id}
	e.st &^= leased | deadLeased
	e.receipt = ""
	e.failures++
	e.unsure = false
}

// leaseOf returns the message whose current lease r names, or nil.
func (m *Model) leaseOf(r string) *entry {
	for _, e := range m.msgs {
		if e.receipt == r && e.st&(leased|deadLeased) != 0 {
			return e
		}
	}
	return nil
}

// Nack checks and follows a Nack of receipt r with delay (and [queue.WithDeadLetter] when
// deadLetter) that returned err over at.
func (m *Model) Nack(r string, delay time.Duration, deadLetter bool, err error, at Span) error {
	m.expire(at)
	e := m.leaseOf(r)
	x, known := m.receipts[r]
	if err != nil {
		switch {
		case !errors.Is(err, queue.ErrUnknownReceipt):
			return fmt.Errorf("Nack: %w", err)
		case e != nil && e.st&^(leased|deadLeased) == 0:
			return m.fault(e.id, "Nack of the lease of %s: %v", e, err)
		case e != nil:
			m.ranOut(e)
		}
		return nil
	}
	if e == nil {
		what := "never delivered"
		if known {
			what = "a receipt of " + x.id
		}
		return fmt.Errorf("Nack of %q (%s) succeeded: it names no current lease", r, what)
	}
	m.note(e.id, at, "nacked #%s with delay %v (dead letter %v)", tail(r), delay, deadLetter)
	m.receipts[r] = receipt{receiptEnded, e.id}
	e.receipt = ""
	e.failures++
	e.unsure = false
	switch {
	case e.st&deadLeased != 0:
		// A dead letter stays one; when it is due again on the dead-letter topic is the engine's.
		e.st, e.dueMin, e.dueMax = dead, at.Start.Add(-m.slack), forever
	case deadLetter || m.maxAttempts > 0 && e.failures >= m.maxAttempts:
		e.st, e.dueMin, e.dueMax, e.failures = dead, at.Start, at.End, 0
	default:
		e.st, e.dueMin, e.dueMax = waiting, at.Start.Add(delay), at.End.Add(delay)
	}
	return nil
}

// LeasesLost follows an engine that lost every lease at at without counting a failure, as one does
// that is opened again on its storage: leased messages are waiting again as they were before
// their delivery (or, for a lease that may have run out before, as that left them).
func (m *Model) LeasesLost(at Span) {
	m.expire(at)
	for _, e := range m.msgs {
		if e.receipt != "" {
			m.receipts[e.receipt] = receipt{receiptEnded, e.id}
			e.receipt = ""
		}
		if e.st&leased != 0 {
			e.st = e.st&^leased | waiting
		}
		if e.st&deadLeased != 0 {
			e.st = e.st&^deadLeased | dead
		}
	}
}

// DeliverNow checks and follows a DeliverNow of id that returned ok and err over at.
func (m *Model) DeliverNow(id string, ok bool, err error, at Span) error {
	m.expire(at)
	if err != nil {
		return fmt.Errorf("DeliverNow(%q): %w", id, err)
	}
	e := m.msgs[id]
	if e == nil {
		if ok {
			return fmt.Errorf("DeliverNow(%q) = true: no such message is waiting", id)
		}
		return nil
	}
	scheduled := e.st&waiting != 0 && e.dueMax.After(at.Start.Add(-m.slack))
	surely := e.st == waiting && !e.maybeGone && e.dueMin.After(at.End.Add(m.slack))
	switch {
	case ok && !scheduled:
		return m.fault(id, "DeliverNow(%q) = true for %s, not scheduled", id, e)
	case !ok && surely:
		return m.fault(id, "DeliverNow(%q) = false for %s, scheduled", id, e)
	case ok:
		m.note(id, at, "delivered now")
		if e.st&leased != 0 && e.receipt != "" {
			// It was scheduled: its lease had run out, a failure counted.
			m.receipts[e.receipt] = receipt{receiptEnded, e.id}
			e.receipt = ""
			e.failures++
		}
		e.st, e.dueMin, e.dueMax, e.maybeGone, e.unsure = waiting, at.Start, at.End, false, false
	}
	return nil
}

// Requeue checks and follows a Requeue of the dead letters of topic (those of ids, or all) that
// returned n and err over at.
func (m *Model) Requeue(topic string, ids []string, n int, err error, at Span) error {
	m.expire(at)
	if err != nil {
		return fmt.Errorf("Requeue(%q): %w", topic, err)
	}
	var sure, maybe []*entry
	for _, e := range m.sorted() {
		if e.topic != topic || e.st&(dead|deadLeased) == 0 || len(ids) > 0 && !slices.Contains(ids, e.id) {
			continue
		}
		if e.st&^(dead|deadLeased) == 0 && !e.maybeGone {
			sure = append(sure, e)
		} else {
			maybe = append(maybe, e)
		}
	}
	if n < len(sure) || n > len(sure)+len(maybe) {
		return fmt.Errorf("Requeue(%q) moved %d dead letters; the model holds %d, and %d more that may be", topic, n, len(sure), len(maybe))
	}
	requeue := func(e *entry) {
		m.note(e.id, at, "requeued")
		if e.receipt != "" {
			m.receipts[e.receipt] = receipt{receiptEnded, e.id}
			e.receipt = ""
		}
		e.st, e.dueMin, e.dueMax, e.failures, e.maybeGone, e.unsure = waiting, at.Start, at.End, 0, false, false
	}
	for _, e := range sure {
		requeue(e)
	}
	if n == len(sure)+len(maybe) {
		for _, e := range maybe {
			requeue(e)
		}
		return nil
	}
	for _, e := range maybe {
		m.note(e.id, at, "maybe requeued")
		// Moved or not: waiting at once, or as it was.
		e.st |= waiting
		e.dueMin = minTime(e.dueMin, at.Start)
	}
	return nil
}

// Purge checks and follows a Purge of topic's messages in state that returned n and err over at.
func (m *Model) Purge(topic string, state queue.State, n int, err error, at Span) error {
	m.expire(at)
	if err != nil {
		return fmt.Errorf("Purge(%q, %s): %w", topic, state, err)
	}
	var sure, maybe []*entry
	for _, e := range m.sorted() {
		can, must := m.in(e, topic, state, at)
		switch {
		case must:
			sure = append(sure, e)
		case can:
			maybe = append(maybe, e)
		}
	}
	if n < len(sure) || n > len(sure)+len(maybe) {
		return fmt.Errorf("Purge(%q, %s) removed %d messages; the model holds %d, and %d more that may be", topic, state, n, len(sure), len(maybe))
	}
	for _, e := range sure {
		m.note(e.id, at, "purged (%s)", state)
		m.finish(e)
	}
	for _, e := range maybe {
		if n == len(sure)+len(maybe) {
			m.note(e.id, at, "purged (%s)", state)
			m.finish(e)
		} else if n > len(sure) {
			m.note(e.id, at, "maybe purged (%s)", state)
			e.maybeGone = true
		}
	}
	return nil
}

// PurgeSome checks and follows the removal of n of topic's messages in state, not all of them
// (one step of an engine's purge, in a budget), after which Messages listed left of that state
// over at: the messages surely in that state and not listed are gone; those that may have been
// are optional.
func (m *Model) PurgeSome(topic string, state queue.State, n int, left []queue.MessageInfo, at Span) error {
	m.expire(at)
	listed := map[string]bool{}
	for _, info := range left {
		listed[info.ID] = true
	}
	var sure, maybe []*entry
	for _, e := range m.sorted() {
		if listed[e.id] {
			continue
		}
		switch can, must := m.in(e, topic, state, at); {
		case must:
			sure = append(sure, e)
		case can:
			maybe = append(maybe, e)
		}
	}
	if n < len(sure) || n > len(sure)+len(maybe) {
		return fmt.Errorf("a purge of %q, %s, removed %d messages; the model misses %d from the listing after it, and %d more may have been removed",
			topic, state, n, len(sure), len(maybe))
	}
	for _, e := range sure {
		m.note(e.id, at, "purged in a budget (%s)", state)
		m.finish(e)
	}
	for _, e := range maybe {
		if n > len(sure) {
			m.note(e.id, at, "maybe purged in a budget (%s)", state)
			e.maybeGone = true
		}
	}
	return nil
}

// Pause follows a Pause (paused) or a Resume of topic that succeeded.
func (m *Model) Pause(topic string, paused bool) {
	if paused {
		m.paused[topic] = true
	} else {
		delete(m.paused, topic)
	}
}

// in reports whether e can be, and whether it surely is, a message of topic in state over at, as
// Topics and Messages count and list them: a waiting message on its topic, scheduled or due; a
// leased one on the topic it was received from; a dead letter as dead on its topic, and scheduled
// or due on the dead-letter topic.
func (m *Model) in(e *entry, topic string, state queue.State, at Span) (can, must bool) {
	dl := e.topic + queue.DeadLetterSuffix
	timed := func(t string) (can, must bool) {
		switch {
		case topic != t:
			return false, false
		case state == queue.Scheduled:
			return e.dueMax.After(at.Start.Add(-m.slack)), e.dueMin.After(at.End.Add(m.slack))
		case state == queue.Due:
			return !e.dueMin.After(at.End.Add(m.slack)), !e.dueMax.After(at.Start.Add(-m.slack))
		}
		return false, false
	}
	possible, sure := 0, false
	for _, s := range []states{waiting, leased, dead, deadLeased} {
		if e.st&s == 0 {
			continue
		}
		possible++
		var c, mu bool
		switch s {
		case waiting:
			c, mu = timed(e.topic)
		case leased:
			c = topic == e.topic && state == queue.Leased
			mu = c
		case dead:
			if topic == e.topic && state == queue.Dead {
				c, mu = true, true
			} else {
				c, mu = timed(dl)
			}
		case deadLeased:
			c = topic == dl && state == queue.Leased
			mu = c
		}
		can, sure = can || c, mu
	}
	return can, possible == 1 && sure && !e.maybeGone
}

// CheckTopics checks what Topics returned over at against the model: every count of every topic,
// and which topics are listed.
func (m *Model) CheckTopics(ts []queue.TopicInfo, at Span) error {
	m.expire(at)
	listed := map[string]queue.TopicInfo{}
	for _, ti := range ts {
		listed[ti.Topic] = ti
	}
	names := map[string]bool{}
	for t := range listed {
		names[t] = true
	}
	for t := range m.paused {
		names[t] = true
	}
	for _, e := range m.msgs {
		names[e.topic], names[e.topic+queue.DeadLetterSuffix] = true, true
	}
	for _, name := range sortedKeys(names) {
		ti, ok := listed[name]
		holds, canHold := false, false
		for _, c := range []struct {
			state queue.State
			got   int64
		}{{queue.Scheduled, ti.Scheduled}, {queue.Due, ti.Due}, {queue.Leased, ti.Leased}, {queue.Dead, ti.Dead}} {
			lo, hi := m.count(name, c.state, at)
			if c.got < lo || c.got > hi {
				return fmt.Errorf("Topics: %q has %d %s; the model has %d to %d", name, c.got, c.state, lo, hi)
			}
			holds, canHold = holds || lo > 0, canHold || hi > 0
		}
		switch {
		case ok && !canHold && !m.paused[name]:
			return fmt.Errorf("Topics lists %q, %+v, which holds nothing and is not paused", name, ti)
		case !ok && (holds || m.paused[name]):
			return fmt.Errorf("Topics does not list %q, which holds messages or is paused", name)
		case ok && ti.Paused != m.paused[name]:
			return fmt.Errorf("Topics: %q paused %v; the model says %v", name, ti.Paused, m.paused[name])
		}
	}
	return nil
}

// count returns how many messages of topic are, at least and at most, in state over at.
func (m *Model) count(topic string, state queue.State, at Span) (lo, hi int64) {
	for _, e := range m.msgs {
		can, must := m.in(e, topic, state, at)
		if must {
			lo++
		}
		if can {
			hi++
		}
	}
	return lo, hi
}

// CheckMessages checks every page of topic's messages in state, listed over at, against the
// model: each message listed may be in that state, none twice, scheduled ones in due order, and
// every message surely in that state is listed.
func (m *Model) CheckMessages(topic string, state queue.State, listed []queue.MessageInfo, at Span) error {
	m.expire(at)
	seen := map[string]bool{}
	for i, info := range listed {
		e := m.msgs[info.ID]
		switch {
		case e == nil:
			return fmt.Errorf("Messages(%q, %s) lists %q, which the model does not hold", topic, state, info.ID)
		case seen[info.ID]:
			return fmt.Errorf("Messages(%q, %s) lists %q twice", topic, state, info.ID)
		case info.State != state || info.Topic != e.topic:
			return fmt.Errorf("Messages(%q, %s) lists %s as %s on %q", topic, state, e, info.State, info.Topic)
		case state == queue.Scheduled && i > 0 && info.DeliverAt.Before(listed[i-1].DeliverAt):
			return fmt.Errorf("Messages(%q, scheduled) lists %q due %v after %q due %v", topic, info.ID, info.DeliverAt,
				listed[i-1].ID, listed[i-1].DeliverAt)
		}
		seen[info.ID] = true
		if can, _ := m.in(e, topic, state, at); !can {
			return fmt.Errorf("Messages(%q, %s) lists %s", topic, state, e)
		}
		if e.st == waiting && e.dueMax != forever && (info.DeliverAt.Before(e.dueMin.Add(-m.slack)) || info.DeliverAt.After(e.dueMax.Add(m.slack))) {
			return fmt.Errorf("Messages(%q, %s) lists %s as due %v", topic, state, e, info.DeliverAt)
		}
	}
	for _, e := range m.sorted() {
		if _, must := m.in(e, topic, state, at); must && !seen[e.id] {
			return fmt.Errorf("Messages(%q, %s) does not list %s", topic, state, e)
		}
	}
	return nil
}

// CheckDueCounts checks what DueCounts(from, step, len(counts)) returned over at against the due
// times of the messages that may be scheduled.
func (m *Model) CheckDueCounts(from time.Time, step time.Duration, counts []int, at Span) error {
	m.expire(at)
	n := len(counts)
	lo, hi := make([]int, n), make([]int, n) // how many each step counts, at least and at most
	index := func(t time.Time) int {         // the step t falls in: -1 before the first, n after the last
		switch {
		case t.Before(from):
			return -1
		case t.Sub(from) >= time.Duration(n)*step:
			return n
		}
		return int(t.Sub(from) / step)
	}
	for _, e := range m.msgs {
		if e.st&(waiting|dead) == 0 {
			continue
		}
		first, last := index(e.dueMin.Add(-m.slack)), index(e.dueMax.Add(m.slack))
		for i := max(first, 0); i <= min(last, n-1); i++ {
			hi[i]++
		}
		sure := e.st == e.st&(waiting|dead) && !e.maybeGone && e.dueMin.After(at.End.Add(m.slack))
		if i := index(e.dueMin.Add(-m.slack)); sure && i >= 0 && i < n && i == last {
			lo[i]++
		}
	}
	for i, got := range counts {
		if got < lo[i] || got > hi[i] {
			return fmt.Errorf("DueCounts from %v by %v: step %d counts %d; the model has %d to %d",
				from.Format(time.RFC3339Nano), step, i, got, lo[i], hi[i])
		}
	}
	return nil
}

// IDs returns the IDs of the messages the model holds (those a purge may have removed included),
// sorted.
func (m *Model) IDs() []string {
	ids := make([]string, 0, len(m.msgs))
	for id := range m.msgs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

// Pending returns the IDs of the messages that must still be delivered (sorted): every one the
// model holds, but those a purge may have removed.
func (m *Model) Pending() []string {
	var ids []string
	for _, e := range m.sorted() {
		if !e.maybeGone {
			ids = append(ids, e.id)
		}
	}
	return ids
}

// Receipts returns the receipts of the current leases, sorted.
func (m *Model) Receipts() []string {
	var rs []string
	for _, e := range m.msgs {
		if e.receipt != "" {
			rs = append(rs, e.receipt)
		}
	}
	slices.Sort(rs)
	return rs
}

// Lease returns the ID of the message whose current lease receipt r names, and the topic it was
// received from; both are empty when r names no current lease.
func (m *Model) Lease(r string) (id, topic string) {
	e := m.leaseOf(r)
	switch {
	case e == nil:
		return "", ""
	case e.st&deadLeased != 0:
		return e.id, e.topic + queue.DeadLetterSuffix
	}
	return e.id, e.topic
}

// Scheduled reports whether the message id is surely scheduled at t: waiting on its topic, due
// later than t by more than the slack.
func (m *Model) Scheduled(id string, t time.Time) bool {
	e := m.msgs[id]
	return e != nil && e.st == waiting && !e.maybeGone && e.dueMin.After(t.Add(m.slack))
}

func (m *Model) sorted() []*entry {
	es := make([]*entry, 0, len(m.msgs))
	for _, id := range m.IDs() {
		es = append(es, m.msgs[id])
	}
	return es
}

func sortedKeys(set map[string]bool) []string {
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func cutSuffix(s, suffix string) (string, bool) {
	if len(s) > len(suffix) && s[len(s)-len(suffix):] == suffix {
		return s[:len(s)-len(suffix)], true
	}
	return s, false
}

// tail returns a short digest of a receipt, enough to tell receipts apart in a message.
func tail(r string) string {
	h := fnv.New32a()
	h.Write([]byte(r))
	return fmt.Sprintf("%08x", h.Sum32())
}
