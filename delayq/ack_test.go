package delayq

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"github.com/tockwheel/tock/delayq/internal/format"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
		if len(ae.Failed) != 2 || ae.Failed[0].Receipt != stale.Receipt || ae.Failed[1].Receipt != "garbage" ||
			!errors.Is(ae.Failed[0].Err, ErrUnknownReceipt) || !errors.Is(ae.Failed[1].Err, ErrUnknownReceipt) {
			t.Fatalf("AckError %+v: want the stale and the malformed receipts failed in order", ae)
		}
		if st := q.Snapshot(); st.Acked != 1 {
			t.Fatalf("Stats.Acked = %d, want 1", st.Acked)
		}
		// A retry of the whole call: the good receipt is acked already, the stale one still fails.
		err = q.Ack(ctx, good.Receipt, stale.Receipt)
		if !errors.As(err, &ae) || len(ae.Failed) != 1 || ae.Failed[0].Receipt != stale.Receipt {
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
		if st := q.Snapshot(); st.Acked != 2 {
			t.Fatalf("Stats.Acked = %d, want 2: a repeated ack is not counted again", st.Acked)
		}
		check(t, q)
	})
}

// TestForgedReceiptIsRefused is the regression test of guessable receipts: a receipt was the
// message's position and a lease counter, so a consumer that knew another's message ID (which
// holds the position) could ack or nack that consumer's lease with its own lease number give or
// take a few. Receipts carry a MAC now: a receipt spliced from the attacker's own and the victim's
// position, or with any byte changed, fails with the error of a receipt that names nothing, and
// the victim's own receipt still works.
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
		b, err := receiptEncoding.DecodeString(own.Receipt)
		if err != nil || len(b) != receiptBytes {
			t.Fatalf("receipt %q does not decode: %v", own.Receipt, err)
		}
		var forgeries []string
		spliced := slices.Clone(b)
		binary.BigEndian.PutUint64(spliced[1:], uint64(origin))
		for d := -3; d <= 3; d++ {
			f := slices.Clone(spliced)
			binary.BigEndian.PutUint64(f[9:], binary.BigEndian.Uint64(b[9:])+uint64(d))
			forgeries = append(forgeries, receiptEncoding.EncodeToString(f))
		}
		for i := range b {
			f := slices.Clone(b)
			f[i] ^= 1
			forgeries = append(forgeries, receiptEncoding.EncodeToString(f))
		}
		forgeries = append(forgeries, strings.ToUpper(own.Receipt), own.Receipt+"=", own.Receipt[1:])
		for _, forged := range forgeries {
			if forged == victim.Receipt {
				t.Fatalf("forged receipt %q is the victim's", forged)
			}
			if err := q.Nack(ctx, forged, 0); !errors.Is(err, ErrUnknownReceipt) || err != errUnknownReceipt {
				t.Fatalf("Nack with forged receipt %q = %v, want plain ErrUnknownReceipt", forged, err)
			}
			if err := q.Ack(ctx, forged); !errors.Is(err, ErrUnknownReceipt) {
				t.Fatalf("Ack with forged receipt %q = %v, want ErrUnknownReceipt", forged, err)
			}
		}
		if st := q.Snapshot(); st.Acked != 0 || st.Nacked != 0 || st.Leased != 2 {
			t.Fatalf("after the forgeries: %+v", st)
		}
		if err := q.Ack(ctx, victim.Receipt, own.Receipt); err != nil {
			t.Fatalf("the real receipts: %v", err)
		}
	})
}

// TestHMACReceiptStillVerifies: receipts of version 1, whose MAC was HMAC-SHA256 under the
// secret, were issued before version 2's AES tag; one issued before an upgrade is still
// accepted by Ack (and Nack), before and after its message is done, and one with a MAC that is
// not the secret's is refused, as is a version 1 receipt carrying a version 2 tag.
func TestHMACReceiptStillVerifies(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, t.TempDir())
		q.Put(ctx, Message{Topic: "t"})
		q.Put(ctx, Message{Topic: "t"})
		v1 := func(receipt string, key []byte) string {
			b, err := receiptEncoding.DecodeString(receipt)
			if err != nil || len(b) != receiptBytes || b[0] != receiptVersion {
				t.Fatalf("receipt %q: %v, version %d", receipt, err, b[0])
			}
			b[0] = receiptHMACVersion
			m := hmac.New(sha256.New, key)
			m.Write(b[:17])
			copy(b[17:], m.Sum(nil))
			return receiptEncoding.EncodeToString(b)
		}
		acked := receiveOne(t, q, "t", time.Second, time.Minute)
		nacked := receiveOne(t, q, "t", time.Second, time.Minute)
		old := v1(acked.Receipt, q.secret[:])
		for _, forged := range []string{
			v1(acked.Receipt, []byte("not the secret")),
			receiptEncoding.EncodeToString(append([]byte{receiptHMACVersion}, must(receiptEncoding.DecodeString(acked.Receipt))[1:]...)),
		} {
			if err := q.Ack(ctx, forged); !errors.Is(err, ErrUnknownReceipt) {
				t.Fatalf("Ack(%q) = %v, want ErrUnknownReceipt", forged, err)
			}
		}
		if err := q.Nack(ctx, v1(nacked.Receipt, q.secret[:]), time.Hour); err != nil {
			t.Fatalf("Nack of a version 1 receipt: %v", err)
		}
		for range 2 { // done, and again
			if err := q.Ack(ctx, old); err != nil {
				t.Fatalf("Ack of a version 1 receipt: %v", err)
			}
		}
		if st := q.Snapshot(); st.Acked != 1 || st.Nacked != 1 || st.Leased != 0 {
			t.Fatalf("after the acks: %+v", st)
		}
	})
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestAckIsIdempotentAcrossRestarts is the regression test of acks remembered only in memory: a
// retried ack was recognised only among the last 65,536 acks since Open, so an ack retried after
// a restart (or after many others) failed as unknown. A receipt now verifies by its MAC under the
// directory's secret, kept on disk: an ack of a message that is done succeeds after a restart, as
// does one of a leased message cancelled since, and a forged one still fails.
func TestAckIsIdempotentAcrossRestarts(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, dir)
		q.Put(ctx, Message{Topic: "acked"})
		cancelled, _ := q.Put(ctx, Message{Topic: "cancelled"})
		q.Put(ctx, Message{Topic: "waiting"})
		acked := receiveOne(t, q, "acked", time.Second, time.Minute)
		leased := receiveOne(t, q, "cancelled", time.Second, time.Minute)
		waiting := receiveOne(t, q, "waiting", time.Second, time.Minute)
		if err := q.Ack(ctx, acked.Receipt); err != nil {
			t.Fatal(err)
		}
		if ok, err := q.Cancel(ctx, cancelled); !ok || err != nil {
			t.Fatalf("Cancel of a leased message: %v, %v", ok, err)
		}
		if err := q.Ack(ctx, leased.Receipt); err != nil {
			t.Fatalf("Ack of a leased message cancelled since: %v; want nil, the message being done", err)
		}
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}

		q = open(t, dir)
		if err := q.Ack(ctx, acked.Receipt, leased.Receipt); err != nil {
			t.Fatalf("Ack after a restart of receipts whose messages are done: %v", err)
		}
		// The lease of the waiting message ended with the restart: its receipt is stale.
		err := q.Ack(ctx, waiting.Receipt)
		var ae *AckError
		if !errors.As(err, &ae) || len(ae.Failed) != 1 || !errors.Is(err, ErrUnknownReceipt) {
			t.Fatalf("Ack after a restart of a receipt whose message waits: %v; want it stale", err)
		}
		again := receiveOne(t, q, "waiting", time.Second, time.Minute)
		if err := q.Ack(ctx, again.Receipt); err != nil {
			t.Fatal(err)
		}
	})
}

// TestOpenMakesASecret checks that a directory without a secret (one made before receipts
// carried a MAC) gets one at Open, durably, that later Opens keep it, and that a damaged one is
// reported and replaced.
func TestOpenMakesASecret(t *testing.T) {
	dir := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, dir)
		q.Put(ctx, Message{Topic: "t"})
		if err := q.Close(); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, secretName)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
		q = open(t, dir)
		d := receiveOne(t, q, "t", time.Second, time.Minute)
		if err := q.Ack(ctx, d.Receipt); err != nil {
			t.Fatal(err)
		}
		q.Close()
		first, err := os.ReadFile(path)
		if _, derr := format.DecodeSecret(first); err != nil || derr != nil {
			t.Fatalf("secret of an older directory after Open: %v, %v", err, derr)
		}
		q = open(t, dir)
		if err := q.Ack(ctx, d.Receipt); err != nil {
			t.Fatalf("Ack after reopening: %v; the secret must not change", err)
		}
		q.Close()
		if again, _ := os.ReadFile(path); !bytes.Equal(again, first) {
			t.Fatal("reopening changed the secret")
		}

		damaged := slices.Clone(first)
		damaged[20] ^= 0xff
		if err := os.WriteFile(path, damaged, 0o600); err != nil {
			t.Fatal(err)
		}
		q = open(t, dir)
		if n := q.Snapshot().CorruptRecords; n != 1 {
			t.Fatalf("a damaged secret counts %d corrupt records; want 1", n)
		}
		if err := q.Ack(ctx, d.Receipt); !errors.Is(err, ErrUnknownReceipt) {
			t.Fatalf("Ack under a replaced secret: %v; want ErrUnknownReceipt", err)
		}
	})
}
