package delayq

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/tockwheel/tock/queue"
)

// TestPurgeWhileTheLoaderMovesMessages is the regression test of a purge that came back: Purge
// read the disk wheel's lists one at a time without holding the queue's lock, and passed over a
// list the loader took while it was read, although its messages were still scheduled: those due
// in the list's slot had moved into memory (swept before the lists were), and those due beyond the
// horizon had been rolled into the next list of the same wheel index (never read). Here the loader
// takes a list while Purge reads it, every time: every message scheduled when Purge began must be
// gone when it returns, wherever the load put it.
func TestPurgeWhileTheLoaderMovesMessages(t *testing.T) {
	base := t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		q := open(t, filepath.Join(base, "q"), WithSlot(100*time.Millisecond), WithHorizon(time.Second), WithCompaction(0, 0),
			WithCheckpointInterval(time.Hour), WithLogger(quiet))
		defer q.Close()
		synctest.Wait()
		t0 := time.Now()
		var ids []string
		for i := range 40 {
			// Due in 1.2 to 1.6 s (the lists of the slots loaded next) and in 30 s (rolled through
			// them every horizon).
			at := t0.Add(1200*time.Millisecond + time.Duration(i%5)*100*time.Millisecond)
			if i%2 == 1 {
				at = t0.Add(30*time.Second + time.Duration(i)*time.Millisecond)
			}
			id, err := q.Put(ctx, Message{Topic: "s", Payload: fmt.Appendf(nil, "m%d", i), DeliverAt: at})
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, id)
		}
		if ti := topicOf(t, q, "s"); ti.Scheduled != 40 {
			t.Fatalf("topic s: %+v; want 40 scheduled", ti)
		}
		// While Purge reads its first list, the loader takes the lists of the next 1.5 s.
		var slept atomic.Bool
		q.mu.Lock()
		q.afterListRead = func() {
			if slept.CompareAndSwap(false, true) {
				time.Sleep(1500 * time.Millisecond)
			}
		}
		q.mu.Unlock()
		n, err := q.Purge(ctx, "s", queue.Scheduled)
		if err != nil {
			t.Fatal(err)
		}
		// Messages due while Purge ran are due now, not scheduled: not Purge's.
		var missed []string
		purged := 0
		for _, id := range ids {
			m, err := q.Message(ctx, id)
			switch {
			case errors.Is(err, ErrNotFound):
				purged++
			case err != nil:
				t.Fatal(err)
			case m.State == queue.Scheduled:
				missed = append(missed, fmt.Sprintf("%s due %v", id, m.DeliverAt.Sub(t0)))
			}
		}
		if len(missed) > 0 || n != purged || purged < 24 {
			t.Fatalf("Purge says it removed %d, %d are gone (want at least the 24 due after it returned); still scheduled: %v", n, purged, missed)
		}
		check(t, q)
	})
}
