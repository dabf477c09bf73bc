package delayq

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tockwheel/tock/internal/testwait"
)

// checkpointWritten returns how many bytes the checkpoint file of dir took to go from before to
// now: what was appended to the same file, or all of a file that replaced it.
func checkpointWritten(t *testing.T, dir string, before os.FileInfo) (os.FileInfo, int64) {
	t.Helper()
	fi, err := os.Stat(filepath.Join(dir, checkpointName))
	if err != nil {
		t.Fatal(err)
	}
	if before != nil && os.SameFile(before, fi) {
		return fi, fi.Size() - before.Size()
	}
	return fi, fi.Size()
}

// TestCheckpointCostFollowsChanges is the regression test of checkpoints that stalled the queue:
// each one copied the chosen-ID index and every message in memory under the queue's lock and
// rewrote the whole file (24 MB with 1M chosen IDs pending) whenever anything had changed. A
// checkpoint now writes what changed since the last: with 30,000 chosen IDs pending, one Put
// costs a checkpoint of a few hundred bytes. The file, rewritten as one full edit when the edits
// outgrow it, keeps describing the state exactly.
func TestCheckpointCostFollowsChanges(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	q := open(t, dir, WithNoSync(), WithCheckpointInterval(time.Hour), WithLogger(quiet))
	at := time.Now().Add(time.Hour)
	batch := make([]Message, 1000)
	for n := 0; n < 30_000; n += len(batch) {
		for i := range batch {
			batch[i] = Message{ID: fmt.Sprintf("order-%08d", n+i), Topic: "t", DeliverAt: at.Add(time.Duration(n+i) * time.Millisecond)}
		}
		if _, err := q.PutBatch(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	if err := q.checkpoint(); err != nil {
		t.Fatal(err)
	}
	fi, full := checkpointWritten(t, dir, nil)
	if full < 30_000*20 {
		t.Fatalf("checkpoint of %d bytes for 30,000 chosen IDs", full)
	}
	for i := range 3 {
		if _, err := q.Put(ctx, Message{ID: fmt.Sprint("one-more-", i), Topic: "t", DeliverAt: at}); err != nil {
			t.Fatal(err)
		}
		if err := q.checkpoint(); err != nil {
			t.Fatal(err)
		}
		var n int64
		fi, n = checkpointWritten(t, dir, fi)
		if n <= 0 || n > 1024 {
			t.Fatalf("checkpoint after one Put wrote %d bytes (the full state is %d)", n, full)
		}
	}
	// Rewritten as one full edit, the file describes the same state, and edits go on after it.
	q.ckptMu.Lock()
	err := q.ckpt.rewrite(dir)
	q.ckptMu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Cancel(ctx, "order-00000007"); err != nil {
		t.Fatal(err)
	}
	reopenPending(t, q, dir, 30_002)
}

// reopenPending closes q, opens dir again, checks its state, and requires want messages pending.
func reopenPending(t *testing.T, q *Queue, dir string, want int64) {
	t.Helper()
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = open(t, dir, WithNoSync(), WithLogger(quiet))
	check(t, q)
	if st := q.Snapshot(); st.Pending != want {
		t.Fatalf("%d pending after reopening, want %d", st.Pending, want)
	}
}

// TestAddedEntriesDoNotRewriteTheCheckpoint is the regression test of a rewrite that cost a burst
// its time: the checkpoint after a slot of 100,000 messages was loaded found the file over its
// bound (twice its full edit and a MiB) because of that edit alone, and rewrote it whole, decoding
// and writing again megabytes that were all state, just before the burst was due. An edit that
// only adds is not counted against the bound; nor is one that only removes, as the acks of the
// burst make, while entries are left (the rewrite would write again what the next edit removes);
// the file is rewritten once the acks have left nothing, describing the state exactly.
func TestAddedEntriesDoNotRewriteTheCheckpoint(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	q := open(t, dir, WithNoSync(), WithCheckpointInterval(time.Hour), WithLogger(quiet))
	const n = 60_000
	putInMemory(t, q, n)
	before, _ := checkpointWritten(t, dir, nil)
	if err := q.checkpoint(); err != nil {
		t.Fatal(err)
	}
	after, added := checkpointWritten(t, dir, before)
	if !os.SameFile(before, after) {
		t.Fatal("the checkpoint holding only added entries rewrote the file")
	}
	if q.ckpt.size <= q.ckpt.rewriteAt() {
		t.Fatalf("premise: the edit of %d entries (%d bytes) did not take the file (%d bytes) over its bound %d",
			n, added, q.ckpt.size, q.ckpt.rewriteAt())
	}
	ackSome := func(k int) {
		for got := 0; got < k; {
			ds, err := q.Receive(ctx, "t", min(1000, k-got), time.Minute)
			if err != nil {
				t.Fatal(err)
			}
			receipts := make([]string, len(ds))
			for i, d := range ds {
				receipts[i] = d.Receipt
			}
			if err := q.Ack(ctx, receipts...); err != nil {
				t.Fatal(err)
			}
			got += len(ds)
		}
	}
	// Half the burst acked: the file, over its bound, is left as it is.
	ackSome(n / 2)
	if err := q.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if half, _ := checkpointWritten(t, dir, after); !os.SameFile(after, half) {
		t.Fatal("the checkpoint after half the acks rewrote the file")
	}
	if q.ckpt.drainFrom == 0 || !q.ckpt.needsRewrite(true) {
		t.Fatalf("premise: the edit of the acks (file of %d bytes, bound %d) did not only remove, or left the file within its bound",
			q.ckpt.size, q.ckpt.rewriteAt())
	}
	ackSome(n - n/2)
	if err := q.checkpoint(); err != nil {
		t.Fatal(err)
	}
	rewritten, size := checkpointWritten(t, dir, after)
	if os.SameFile(after, rewritten) || size >= added/10 {
		t.Fatalf("after the acks, the checkpoint was not rewritten: %d bytes, the same file %v", size, os.SameFile(after, rewritten))
	}
	reopenPending(t, q, dir, 0)
}

// A run of edits that only remove leaves the file over its bound only until nothing is left to
// write, or until the run has doubled the file; an edit that does more ends the run.
func TestRemovingEditsRewriteOnceDoubled(t *testing.T) {
	c := &checkpointFile{size: 100 << 20, fullSize: 1 << 20}
	if !c.needsRewrite(false) {
		t.Fatal("premise: the file is not over its bound")
	}
	c.drainFrom = 60 << 20
	if c.needsRewrite(false) {
		t.Error("rewritten during a run of edits that only remove, before it doubled the file")
	}
	if !c.needsRewrite(true) {
		t.Error("not rewritten when nothing is left to write")
	}
	c.size = 120<<20 + 1
	if !c.needsRewrite(false) {
		t.Error("not rewritten once the run of edits that only remove doubled the file")
	}
	c.drainFrom = 0
	c.size = 100 << 20
	if !c.needsRewrite(false) {
		t.Error("not rewritten over its bound after an edit that did more than remove")
	}
}

// TestRemovalsJournalOrigins is the regression test of the journal of a burst's acks: each ack of
// a message the last checkpoint holds journaled an op of 80 bytes, and growing the journal to a
// slot of them was 6% of tockd's CPU during the burst. Such a removal is journaled as its origin
// alone; one of a message changed since the checkpoint replaces its op; either way the next
// checkpoint, and the state reopened from it, has the message gone.
func TestRemovalsJournalOrigins(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	q := open(t, dir, WithNoSync(), WithCheckpointInterval(time.Hour), WithLogger(quiet))
	const n = 1000
	putInMemory(t, q, n)
	if err := q.checkpoint(); err != nil {
		t.Fatal(err)
	}
	ds, err := q.Receive(ctx, "t", n, time.Minute)
	if err != nil || len(ds) != n {
		t.Fatalf("Receive: %d deliveries, %v; want %d", len(ds), err, n)
	}
	// One is nacked (its op changes it) and received again before its ack.
	if err := q.Nack(ctx, ds[0].Receipt, 0); err != nil {
		t.Fatal(err)
	}
	again, err := q.Receive(ctx, "t", 1, time.Minute)
	if err != nil || len(again) != 1 {
		t.Fatalf("Receive after the Nack: %d deliveries, %v", len(again), err)
	}
	receipts := []string{again[0].Receipt}
	for _, d := range ds[1:] {
		receipts = append(receipts, d.Receipt)
	}
	if err := q.Ack(ctx, receipts...); err != nil {
		t.Fatal(err)
	}
	q.mu.Lock()
	ops, removed := len(q.mem.ops), len(q.mem.removedOps)
	q.mu.Unlock()
	if ops != 1 || removed != n-1 {
		t.Fatalf("journal after the acks: %d ops and %d origins, want 1 and %d", ops, removed, n-1)
	}
	if err := q.checkpoint(); err != nil {
		t.Fatal(err)
	}
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	ck, err := readCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ck.entries) != 0 {
		t.Fatalf("the checkpoint holds %d entries after every message was acked", len(ck.entries))
	}
	q = open(t, dir, WithNoSync(), WithLogger(quiet))
	check(t, q)
	q.mu.Lock()
	left := len(q.mem.byOrigin)
	q.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d messages in memory after reopening, want none", left)
	}
}

// putInMemory puts n messages of topic t (a multiple of 1,000, or fewer) due at once into q, which
// holds nothing else, and waits until they are in memory, entries of the checkpoint: put into the
// current slot's list before the loader reached it, they are once it has.
func putInMemory(t *testing.T, q *Queue, n int) {
	t.Helper()
	ctx := context.Background()
	batch := make([]Message, min(n, 1000))
	for range n / len(batch) {
		for i := range batch {
			batch[i] = Message{Topic: "t"}
		}
		if _, err := q.PutBatch(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	testwait.Until(t, ctx, "the messages in memory", func() bool {
		q.mu.Lock()
		defer q.mu.Unlock()
		return len(q.mem.byOrigin) == n
	})
}
