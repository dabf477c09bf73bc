package delayq

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"
)

// TestAckReportsEachReceipt is the regression test of a partial ack: Ack(good, stale) acked the
// good receipt but failed as a whole, so a caller could not tell which was acked, and a retry of
// the good one failed too. The error now lists the receipts not acked and why, counts the others,
// and a repeated ack of an acked receipt succeeds.
func TestAckReportsEachReceipt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, t.TempDir(), WithBackoff(time.Second, time.Second))
		q.Put(ctx, Message{Topic: "stale"})
		q.Put(ctx, Message{Topic: "good"})
		stale := receiveOne(t, q, "stale", time.Second, time.Second)
		again := receiveOne(t, q, "stale", time.Minute, time.Minute) // after expiry and backoff
		good := receiveOne(t, q, "good", time.Second, time.Minute)

		err := q.Ack(ctx, good.Receipt, stale.Receipt, "garbage")
		var ae *AckError
		if !errors.As(err, &ae) || !errors.Is(err, ErrUnknownReceipt) {
			t.Fatalf("Ack(good, stale, garbage) = %v, want an *AckError matching ErrUnknownReceipt", err)
		}
		if ae.Acked != 1 || len(ae.Failed) != 2 || ae.Failed[0].Receipt != stale.Receipt || ae.Failed[1].Receipt != "garbage" ||
			!errors.Is(ae.Failed[0].Err, ErrUnknownReceipt) || !errors.Is(ae.Failed[1].Err, ErrUnknownReceipt) {
			t.Fatalf("AckError %+v: want 1 acked, the stale and the malformed receipts failed in order", ae)
		}
		if st := q.Stats(); st.Acked != 1 {
			t.Fatalf("Stats.Acked = %d, want 1", st.Acked)
		}
		// A retry of the whole call: the good receipt is acked already, the stale one still fails.
		err = q.Ack(ctx, good.Receipt, stale.Receipt)
		if !errors.As(err, &ae) || ae.Acked != 0 || len(ae.Failed) != 1 || ae.Failed[0].Receipt != stale.Receipt {
			t.Fatalf("retried Ack = %v, want only the stale receipt failed", err)
		}
		if err := q.Ack(ctx, good.Receipt); err != nil {
			t.Fatalf("a retried ack of an acked receipt: %v", err)
		}
		if err := q.Nack(ctx, good.Receipt, 0); !errors.Is(err, ErrUnknownReceipt) {
			t.Fatalf("Nack of an acked receipt: %v", err)
		}
		if err := q.Ack(ctx, again.Receipt); err != nil {
			t.Fatal(err)
		}
		if st := q.Stats(); st.Acked != 2 {
			t.Fatalf("Stats.Acked = %d, want 2: a repeated ack is not counted again", st.Acked)
		}
		check(t, q)
	})
}

// TestForgedReceiptIsRefused is the regression test of guessable receipts: a receipt was the
// message's position and a lease counter, so a consumer that knew another's message ID (which
// holds the position) could ack or nack that consumer's lease with its own lease number give or
// take a few. Lease numbers are random now: every such forgery fails, with the error of a receipt
// that names nothing, and the victim's own receipt still works.
func TestForgedReceiptIsRefused(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, t.TempDir())
		victimID, _ := q.Put(ctx, Message{Topic: "victim"})
		q.Put(ctx, Message{Topic: "attacker"})
		victim := receiveOne(t, q, "victim", time.Second, time.Minute)
		own := receiveOne(t, q, "attacker", time.Second, time.Minute)
		_, origin, ok := parseID(victimID)
		if !ok {
			t.Fatalf("generated ID %q does not parse", victimID)
		}
		_, lease, ok := parseReceipt(own.Receipt)
		if !ok {
			t.Fatalf("receipt %q does not parse", own.Receipt)
		}
		for d := -3; d <= 3; d++ {
			forged := makeReceipt(origin, lease+uint64(d))
			if forged == victim.Receipt {
				t.Fatalf("receipt of the victim's lease is the attacker's lease %+d", d)
			}
			if err := q.Nack(ctx, forged, 0); !errors.Is(err, ErrUnknownReceipt) || err.Error() != ErrUnknownReceipt.Error() {
				t.Fatalf("Nack with forged receipt (lease %+d) = %v, want plain ErrUnknownReceipt", d, err)
			}
			if err := q.Ack(ctx, forged); !errors.Is(err, ErrUnknownReceipt) {
				t.Fatalf("Ack with forged receipt (lease %+d) = %v, want ErrUnknownReceipt", d, err)
			}
		}
		// The same error for a position where no message is.
		if err := q.Nack(ctx, makeReceipt(origin+1, lease), 0); err.Error() != ErrUnknownReceipt.Error() {
			t.Fatalf("Nack naming no message = %v, want the same error as a forged one", err)
		}
		if st := q.Stats(); st.Acked != 0 || st.Nacked != 0 || st.Leased != 2 {
			t.Fatalf("after the forgeries: %+v", st)
		}
		if err := q.Ack(ctx, victim.Receipt, own.Receipt); err != nil {
			t.Fatalf("the real receipts: %v", err)
		}
	})
}
