package queuetest

import (
	"context"
	"errors"
	"time"

	"github.com/tockwheel/tock/queue"
)

// The cases about leases: expiry, nack, dead letters and acks.

// testLeaseExpiry lets a lease run out and checks the message comes again, not before the lease
// and the backoff are over, as attempt 2; the first receipt is then stale.
func testLeaseExpiry(ctx context.Context, h *env) {
	const visibility = 150 * time.Millisecond
	id := h.put(ctx, queue.Message{Topic: "t"})
	// The lease begins in the engine, after this call to Receive began and before it returned:
	// only the time before the call bounds it from below whatever the engine's latency.
	asked := time.Now()
	first := h.receiveOne(ctx, "t", visibility)
	second := h.receiveOne(ctx, "t", time.Minute)
	if second.ID != id || second.Attempt != 2 {
		h.Fatalf("after the lease ran out, delivered %q attempt %d; want %q attempt 2", second.ID, second.Attempt, id)
	}
	if again := time.Since(asked); again < visibility+Backoff {
		h.Fatalf("delivered again %v after the Receive that leased it was called; want at least the visibility %v and the backoff %v",
			again, visibility, Backoff)
	}
	err := h.e.Ack(ctx, first.Receipt)
	h.wantErr("Ack of a lease that ran out and was leased again", err, queue.ErrUnknownReceipt)
	var ae *queue.AckError
	if !errors.As(err, &ae) || len(ae.Failed) != 1 || ae.Failed[0].Receipt != first.Receipt {
		h.Fatalf("Ack of a stale receipt: %#v; want an *AckError listing it", err)
	}
	h.ack(ctx, second.Receipt)
	h.expectNothing(ctx, "t", 2*Backoff)
}

// testNack nacks with a delay and checks the message comes again after it, as attempt 2.
func testNack(ctx context.Context, h *env) {
	const delay = 200 * time.Millisecond
	id := h.put(ctx, queue.Message{Topic: "t"})
	d := h.receiveOne(ctx, "t", time.Minute)
	nacked := time.Now()
	if err := h.e.Nack(ctx, d.Receipt, delay); err != nil {
		h.Fatalf("Nack: %v", err)
	}
	again := h.receiveOne(ctx, "t", time.Minute)
	if again.ID != id || again.Attempt != 2 {
		h.Fatalf("after Nack, delivered %q attempt %d; want %q attempt 2", again.ID, again.Attempt, id)
	}
	if took := time.Since(nacked); took < delay {
		h.Fatalf("delivered %v after a Nack with delay %v", took, delay)
	}
	h.wantErr("Nack of a receipt already nacked", h.e.Nack(ctx, d.Receipt, 0), queue.ErrUnknownReceipt)
	h.wantErr("Nack of a forged receipt", h.e.Nack(ctx, "forged", 0), queue.ErrUnknownReceipt)
	h.wantErr("Nack with a negative delay", h.e.Nack(ctx, again.Receipt, -time.Second), queue.ErrInvalid)
	h.ack(ctx, again.Receipt)
}

// testDeadLetter fails a message MaxAttempts times and checks it moves to the dead-letter topic,
// payload and ID kept, and leaves its own topic.
func testDeadLetter(ctx context.Context, h *env) {
	id := h.put(ctx, queue.Message{Topic: "t", Payload: payload("doomed")})
	for attempt := 1; attempt <= MaxAttempts; attempt++ {
		d := h.receiveOne(ctx, "t", time.Minute)
		if d.ID != id || d.Attempt != attempt {
			h.Fatalf("delivered %q attempt %d; want %q attempt %d", d.ID, d.Attempt, id, attempt)
		}
		if err := h.e.Nack(ctx, d.Receipt, 0); err != nil {
			h.Fatalf("Nack of attempt %d: %v", attempt, err)
		}
	}
	dead := h.receiveOne(ctx, "t"+queue.DeadLetterSuffix, time.Minute)
	if dead.ID != id || string(dead.Payload) != "doomed" {
		h.Fatalf("dead letter %q %q; want %q %q", dead.ID, dead.Payload, id, "doomed")
	}
	h.expectNothing(ctx, "t", 300*time.Millisecond)
	h.ack(ctx, dead.Receipt)
}

// testAckIdempotent acks a receipt twice: both succeed, and the message is not delivered again.
func testAckIdempotent(ctx context.Context, h *env) {
	h.put(ctx, queue.Message{Topic: "t"})
	d := h.receiveOne(ctx, "t", 200*time.Millisecond)
	h.ack(ctx, d.Receipt)
	h.ack(ctx, d.Receipt)
	h.ack(ctx, d.Receipt, d.Receipt)
	h.expectNothing(ctx, "t", 200*time.Millisecond+2*Backoff)
}

// testAckPartial acks a good receipt beside bad ones: the good one is acked, the error lists the
// others, in order, each matching ErrUnknownReceipt.
func testAckPartial(ctx context.Context, h *env) {
	h.put(ctx, queue.Message{Topic: "t"})
	d := h.receiveOne(ctx, "t", 200*time.Millisecond)
	bad := []string{"not-a-receipt", d.Receipt + "0", ""}
	err := h.e.Ack(ctx, bad[0], d.Receipt, bad[1], bad[2])
	var ae *queue.AckError
	if !errors.As(err, &ae) || !errors.Is(err, queue.ErrUnknownReceipt) {
		h.Fatalf("Ack of one good and three bad receipts: %v; want an *AckError matching ErrUnknownReceipt", err)
	}
	if len(ae.Failed) != len(bad) {
		h.Fatalf("AckError lists %d receipts; want the %d bad ones", len(ae.Failed), len(bad))
	}
	for i, f := range ae.Failed {
		if f.Receipt != bad[i] || !errors.Is(f.Err, queue.ErrUnknownReceipt) {
			h.Errorf("AckError.Failed[%d] = %q: %v; want %q: ErrUnknownReceipt", i, f.Receipt, f.Err, bad[i])
		}
	}
	h.expectNothing(ctx, "t", 200*time.Millisecond+2*Backoff)
}

// testForgedReceipts leases two messages and tries every receipt one character away from the first
// one's: none may ack anything, and both messages stay leased to their holders. For each position
// the first forgery goes alone and the others in one Ack, which must refuse each of them: a few
// thousand forgeries one call each took minutes over HTTP under the race detector on a busy machine.
func testForgedReceipts(ctx context.Context, h *env) {
	h.put(ctx, queue.Message{Topic: "t"})
	h.put(ctx, queue.Message{Topic: "t"})
	// Leases of an hour: the forgeries must not outlast them, however slow the machine.
	ds := h.receiveAll(ctx, "t", 2, time.Hour)
	own, victim := ds[0], ds[1]

	alphabet := map[byte]bool{}
	for _, d := range ds {
		for i := range len(d.Receipt) {
			alphabet[d.Receipt[i]] = true
		}
	}
	tried := 0
	for i := range len(own.Receipt) {
		var forged []string
		for c := range alphabet {
			if c == own.Receipt[i] {
				continue
			}
			f := own.Receipt[:i] + string(c) + own.Receipt[i+1:]
			if f == victim.Receipt {
				h.Fatalf("receipt %q is one character away from another lease's %q: receipts are guessable",
					own.Receipt, victim.Receipt)
			}
			forged = append(forged, f)
		}
		if len(forged) == 0 {
			continue
		}
		tried += len(forged)
		if err := h.e.Ack(ctx, forged[0]); !errors.Is(err, queue.ErrUnknownReceipt) {
			h.Fatalf("Ack of forged receipt %q (from %q): %v; want ErrUnknownReceipt", forged[0], own.Receipt, err)
		}
		rest := forged[1:]
		if len(rest) == 0 {
			continue
		}
		err := h.e.Ack(ctx, rest...)
		var ae *queue.AckError
		if !errors.As(err, &ae) || !errors.Is(err, queue.ErrUnknownReceipt) {
			h.Fatalf("Ack of %d forged receipts (from %q): %v; want an *AckError matching ErrUnknownReceipt", len(rest), own.Receipt, err)
		}
		if len(ae.Failed) != len(rest) {
			h.Fatalf("Ack of %d forged receipts refused %d of them; want all", len(rest), len(ae.Failed))
		}
		for j, f := range ae.Failed {
			if f.Receipt != rest[j] || !errors.Is(f.Err, queue.ErrUnknownReceipt) {
				h.Fatalf("AckError.Failed[%d] = %q: %v; want %q: ErrUnknownReceipt", j, f.Receipt, f.Err, rest[j])
			}
		}
	}
	// Both holders still hold their leases: their receipts work, and nothing is due meanwhile.
	h.expectNothing(ctx, "t", 100*time.Millisecond)
	h.ack(ctx, own.Receipt, victim.Receipt)
	h.Logf("%d forged receipts refused", tried)
}
