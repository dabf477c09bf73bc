package queuetest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tockwheel/tock/queue"
)

// The cases of a consumer's finer hold on a lease: extending it, failing it with a reason, and
// failing it for good.

// testExtend extends a short lease well past its first deadline, several times: the message does
// not come again before the last extension's end (measured from before the call that set it), and
// then comes as attempt 2. Receipts of no current lease are refused, and nothing changes.
//
// An Extend must be called while its lease is current, which a loaded machine may not manage with
// short leases; a try in which one was called too late to be sure proves nothing, and the case
// tries again with leases twice as long.
func testExtend(ctx context.Context, h *env) {
	h.leasesLongEnough("Extend", func(topic string, first time.Duration) bool { return extendInTime(ctx, h, topic, first) })
}

// leasesLongEnough calls try with a topic of its own and first leases of 300 ms, then twice as
// long each time try returns false (a call of what it tests, refused, came too late to be sure
// that its leases were current), up to 2.4 s; the test fails when no try was in time.
func (h *env) leasesLongEnough(what string, try func(topic string, first time.Duration) bool) {
	h.Helper()
	for first := 300 * time.Millisecond; first <= 2400*time.Millisecond; first *= 2 {
		if try(fmt.Sprint("t", first.Milliseconds()), first) {
			return
		}
		h.Logf("an %s of %v leases was called too late to be sure they were current; again with longer leases", what, first)
	}
	h.Fatalf("no %s of leases up to 2.4 s was called in time: the machine never ran the case in time", what)
}

// extendInTime runs testExtend's check on topic with a first lease of first, extended to three
// times that. It returns false, having checked nothing more, if an Extend refused as of no current
// lease returned when its lease might have run out.
func extendInTime(ctx context.Context, h *env, topic string, first time.Duration) bool {
	h.Helper()
	longer := 3 * first
	id := h.put(ctx, queue.Message{Topic: topic})
	asked := time.Now()
	d := h.receiveOne(ctx, topic, first)
	current := asked.Add(first) // the lease runs at least until then: it began after asked
	var extended time.Time
	for range 3 {
		extended = time.Now()
		if err := h.e.Extend(ctx, d.Receipt, longer); err != nil {
			// The engine acted before the call returned, maybe long after it began (a busy
			// machine, a server's round trip): only a refusal that returned before the lease
			// could run out is wrong.
			returned := time.Now()
			if errors.Is(err, queue.ErrUnknownReceipt) && !returned.Before(current) {
				return false
			}
			h.Fatalf("Extend of a current lease (returned %v before it could run out): %v", current.Sub(returned), err)
		}
		current = extended.Add(longer)
		time.Sleep(longer / 3)
	}
	h.wantErr("Extend with a zero visibility", h.e.Extend(ctx, d.Receipt, 0), queue.ErrInvalid)
	h.wantErr("Extend of a forged receipt", h.e.Extend(ctx, d.Receipt+"0", time.Minute), queue.ErrUnknownReceipt)
	again := h.receiveOne(ctx, topic, time.Minute)
	if again.ID != id || again.Attempt != 2 {
		h.Fatalf("after the extended lease ran out, delivered %q attempt %d; want %q attempt 2", again.ID, again.Attempt, id)
	}
	if took := time.Since(extended); took < longer {
		h.Fatalf("delivered again %v after the last Extend to %v began: the extension did not hold", took, longer)
	}
	h.wantErr("Extend of a lease that ran out", h.e.Extend(ctx, d.Receipt, time.Minute), queue.ErrUnknownReceipt)
	h.ack(ctx, again.Receipt)
	h.wantErr("Extend of an acked lease", h.e.Extend(ctx, again.Receipt, time.Minute), queue.ErrUnknownReceipt)
	h.expectNothing(ctx, topic, 300*time.Millisecond)
	return true
}

// testExtendShortens extends a long lease to a short one: the message comes again soon after.
func testExtendShortens(ctx context.Context, h *env) {
	id := h.put(ctx, queue.Message{Topic: "t"})
	d := h.receiveOne(ctx, "t", time.Hour)
	if err := h.e.Extend(ctx, d.Receipt, 100*time.Millisecond); err != nil {
		h.Fatalf("Extend to a shorter lease: %v", err)
	}
	again := h.receiveOne(ctx, "t", time.Minute)
	if again.ID != id || again.Attempt != 2 {
		h.Fatalf("after a lease of an hour was cut to 100ms, delivered %q attempt %d; want %q attempt 2", again.ID, again.Attempt, id)
	}
	h.wantErr("Nack of a lease cut short that ran out", h.e.Nack(ctx, d.Receipt, 0), queue.ErrUnknownReceipt)
	h.ack(ctx, again.Receipt)
}

// testExtendNackedLease checks that a nacked lease cannot be extended.
func testExtendNackedLease(ctx context.Context, h *env) {
	h.put(ctx, queue.Message{Topic: "t"})
	d := h.receiveOne(ctx, "t", time.Minute)
	if err := h.e.Nack(ctx, d.Receipt, time.Minute); err != nil {
		h.Fatalf("Nack: %v", err)
	}
	h.wantErr("Extend of a nacked lease", h.e.Extend(ctx, d.Receipt, time.Minute), queue.ErrUnknownReceipt)
}

// testExtendBatch extends several leases in one call (queue.ExtendBatch: the engine's own
// ExtendBatch when it is a queue.BatchExtender): the outcome is per receipt, those of no current
// lease listed in order in an *ExtendError, the others extended; then a batch cuts its leases
// short, and the messages come again, each once.
func testExtendBatch(ctx context.Context, h *env) {
	h.leasesLongEnough("ExtendBatch", func(topic string, first time.Duration) bool { return extendBatchInTime(ctx, h, topic, first) })
}

// extendBatchInTime runs testExtendBatch on topic with first leases of first. It returns false,
// having checked nothing more, if the batch was called when its leases might have run out.
func extendBatchInTime(ctx context.Context, h *env, topic string, first time.Duration) bool {
	h.Helper()
	ids := make(map[string]bool)
	for range 4 {
		ids[h.put(ctx, queue.Message{Topic: topic})] = true
	}
	asked := time.Now()
	ds := h.receiveAll(ctx, topic, 4, first)
	h.ack(ctx, ds[3].Receipt)
	batch := []string{ds[0].Receipt, ds[0].Receipt + "0", ds[1].Receipt, ds[3].Receipt, ds[2].Receipt}
	err := queue.ExtendBatch(ctx, h.e, batch, time.Hour)
	// The leases end first after they were asked for, or later; the engine extended them before
	// the call returned. A call that returned later may have come after their end (over HTTP, the
	// request can reach the engine long after the call began).
	returned := time.Now()
	var xe *queue.ExtendError
	switch {
	case !errors.As(err, &xe):
		h.Fatalf("ExtendBatch of 3 current leases, a forged receipt and an acked one: %v; want an *queue.ExtendError", err)
	case len(xe.Failed) > 2 && !returned.Before(asked.Add(first)):
		return false
	case len(xe.Failed) != 2 || xe.Failed[0].Receipt != batch[1] || xe.Failed[1].Receipt != batch[3]:
		h.Fatalf("ExtendBatch refused %d receipts (%v); want the forged and the acked one, in that order", len(xe.Failed), err)
	}
	h.wantErr("ExtendBatch with two refused receipts", err, queue.ErrUnknownReceipt)
	h.expectNothing(ctx, topic, 2*first) // held for an hour now
	h.wantErr("ExtendBatch with a zero visibility", queue.ExtendBatch(ctx, h.e, batch[:1], 0), queue.ErrInvalid)
	if err := queue.ExtendBatch(ctx, h.e, nil, time.Minute); err != nil {
		h.Fatalf("ExtendBatch of no receipts: %v", err)
	}
	cut := time.Now()
	if err := queue.ExtendBatch(ctx, h.e, []string{ds[2].Receipt, ds[0].Receipt, ds[1].Receipt}, 100*time.Millisecond); err != nil {
		h.Fatalf("ExtendBatch cutting 3 leases of an hour to 100ms: %v", err)
	}
	again := h.receiveAll(ctx, topic, 3, time.Minute)
	if took := time.Since(cut); took < 100*time.Millisecond {
		h.Fatalf("delivered again %v after the leases were cut to 100ms", took)
	}
	for _, d := range again {
		if !ids[d.ID] || d.ID == ds[3].ID || d.Attempt != 2 {
			h.Fatalf("after the cut leases ran out, delivered %q attempt %d; want the 3 messages not acked, attempt 2", d.ID, d.Attempt)
		}
		h.ack(ctx, d.Receipt)
	}
	if again[0].ID == again[1].ID || again[1].ID == again[2].ID || again[0].ID == again[2].ID {
		h.Fatalf("delivered again %q, %q and %q; want 3 different messages", again[0].ID, again[1].ID, again[2].ID)
	}
	return true
}

// testNackDeadLetter fails a message for good on its first delivery: it goes to the dead-letter
// topic at once, its ID and payload kept, and leaves its own topic.
func testNackDeadLetter(ctx context.Context, h *env) {
	id := h.put(ctx, queue.Message{Topic: "t", Payload: payload("poison")})
	d := h.receiveOne(ctx, "t", time.Minute)
	if err := h.e.Nack(ctx, d.Receipt, time.Hour, queue.WithDeadLetter(), queue.WithReason("cannot parse")); err != nil {
		h.Fatalf("Nack to the dead letters: %v", err)
	}
	dead := h.receiveOne(ctx, "t"+queue.DeadLetterSuffix, time.Minute)
	if dead.ID != id || string(dead.Payload) != "poison" {
		h.Fatalf("dead letter %q %q; want %q %q", dead.ID, dead.Payload, id, "poison")
	}
	// Failed for good on the dead-letter topic too: it has nowhere further to go, and stays there.
	if err := h.e.Nack(ctx, dead.Receipt, 0, queue.WithDeadLetter()); err != nil {
		h.Fatalf("Nack to the dead letters of a dead letter: %v", err)
	}
	h.expectNothing(ctx, "t", 300*time.Millisecond)
}

// testNackReasonRefused gives reasons the contract refuses: nothing changes, and the lease is
// still held.
func testNackReasonRefused(ctx context.Context, h *env) {
	h.put(ctx, queue.Message{Topic: "t"})
	d := h.receiveOne(ctx, "t", time.Minute)
	long := strings.Repeat("x", queue.MaxReason+1)
	h.wantErr("Nack with a reason over MaxReason", h.e.Nack(ctx, d.Receipt, 0, queue.WithReason(long)), queue.ErrInvalid)
	h.wantErr("Nack with a reason of invalid UTF-8", h.e.Nack(ctx, d.Receipt, 0, queue.WithReason("\xff")), queue.ErrInvalid)
	if err := h.e.Extend(ctx, d.Receipt, time.Minute); err != nil {
		h.Fatalf("Extend after the refused Nacks: %v; the lease must still be held", err)
	}
	if err := h.e.Nack(ctx, d.Receipt, time.Hour, queue.WithReason(queue.CutReason(long)), nil); err != nil {
		h.Fatalf("Nack with a reason cut by CutReason: %v", err)
	}
	h.expectNothing(ctx, "t", 300*time.Millisecond)
}

// testFailureReasons (a queue.Admin case) checks what a message says of its last failure: a
// Nack's reason, forgotten by a failure that gives none, and a failure for good with its reason.
func testFailureReasons(ctx context.Context, h *env, a queue.Admin) {
	id := h.put(ctx, queue.Message{Topic: "t"})
	failure := func(what, wantFailure, wantReason string) queue.MessageInfo {
		h.Helper()
		m, err := a.Message(ctx, id)
		if err != nil {
			h.Fatalf("Message after %s: %v", what, err)
		}
		if m.LastFailure != wantFailure || m.Reason != wantReason || m.FailedAt.IsZero() {
			h.Fatalf("after %s: last failure %q, reason %q, at %v; want %q, %q", what, m.LastFailure, m.Reason, m.FailedAt, wantFailure, wantReason)
		}
		return m
	}
	d := h.receiveOne(ctx, "t", time.Minute)
	if err := h.e.Nack(ctx, d.Receipt, 0, queue.WithReason("smtp: 451 try later")); err != nil {
		h.Fatalf("Nack with a reason: %v", err)
	}
	failure("a Nack with a reason", "nacked", "smtp: 451 try later")
	d = h.receiveOne(ctx, "t", time.Minute)
	if err := h.e.Nack(ctx, d.Receipt, 0); err != nil {
		h.Fatalf("Nack: %v", err)
	}
	failure("a Nack without one", "nacked", "")
	d = h.receiveOne(ctx, "t", time.Minute)
	if err := h.e.Nack(ctx, d.Receipt, 0, queue.WithDeadLetter(), queue.WithReason("bad address")); err != nil {
		h.Fatalf("Nack to the dead letters: %v", err)
	}
	if m := failure("a Nack to the dead letters", "dead-lettered", "bad address"); m.State != queue.Dead || m.Topic != "t" {
		h.Fatalf("a message failed for good is %s on %q; want dead on %q", m.State, m.Topic, "t")
	}
	if n, err := a.Requeue(ctx, "t", id); err != nil || n != 1 {
		h.Fatalf("Requeue: %d, %v", n, err)
	}
	m, err := a.Message(ctx, id)
	if err != nil || m.LastFailure != "" || m.Reason != "" {
		h.Fatalf("a requeued message: %+v, %v; want its failure forgotten", m, err)
	}
	h.ack(ctx, h.receiveOne(ctx, "t", time.Minute).Receipt)
}
