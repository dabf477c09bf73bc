package delayq

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"
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
	if err := q.Close(); err != nil {
		t.Fatal(err)
	}
	q = open(t, dir, WithNoSync(), WithLogger(quiet))
	check(t, q)
	if st := q.Snapshot(); st.Pending != 30_002 {
		t.Fatalf("%d pending after reopening, want 30,002", st.Pending)
	}
}
