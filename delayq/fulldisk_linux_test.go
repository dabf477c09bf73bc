package delayq

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/tockwheel/tock/internal/disktest"
)

// TestRealFullDiskAtEveryStep fills a real disk (a small tmpfs) under producers, round after
// round, with the space back in between, while the queue checkpoints every few milliseconds,
// starts a segment every 16 KiB and compacts eagerly: the disk fills in the middle of a batch, of
// a checkpoint edit, of a segment's start or a compaction's copies, wherever the producers and
// the background tasks happen to be. Every call that fails matches ErrUnavailable; once space is
// back, the queue opened again (its checkpoint ending, perhaps, in an edit cut short) holds every
// acknowledged message and delivers each, none early.
func TestRealFullDiskAtEveryStep(t *testing.T) {
	disk := disktest.Small(t, 2<<20)
	dir := filepath.Join(disk, "q")
	ballast := filepath.Join(disk, "ballast")
	opts := []Option{WithSegmentSize(16 << 10), WithCheckpointInterval(5 * time.Millisecond), WithCompaction(0.9, 0)}
	a := &acked{due: make(map[string]time.Time)}
	rng := rand.New(rand.NewPCG(18, 55))
	const rounds = 6
	for round := range rounds {
		q := open(t, dir, opts...)
		errs := putUntilFailure(t, q, uint64(round)+100, a, len(a.due)+300, 3*time.Second, func() {
			disktest.FillTo(t, ballast, rng.Int64N(16<<10))
		})
		for p, err := range errs {
			if !errors.Is(err, ErrUnavailable) {
				t.Errorf("round %d: producer %d: %v (%T), not ErrUnavailable", round, p, err, err)
			}
		}
		if err := q.Close(); err != nil && !errors.Is(err, ErrUnavailable) {
			t.Errorf("round %d: Close: %v, not ErrUnavailable", round, err)
		}
		// An Open on the full disk fails with ErrUnavailable, or succeeds (it may write nothing).
		if q, err := Open(dir, opts...); err == nil {
			q.Close()
		} else if !errors.Is(err, ErrUnavailable) {
			t.Errorf("round %d: Open on the full disk: %v, not ErrUnavailable", round, err)
		}
		if err := os.Remove(ballast); err != nil {
			t.Fatal(err)
		}
	}
	q := open(t, dir, opts...)
	t.Logf("%d messages acknowledged over %d outages", len(a.due), rounds)
	drainAcked(t, q, "full", a.due)
}
