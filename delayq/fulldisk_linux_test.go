package delayq

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// smallDisk mounts a tmpfs of size bytes on a new directory for the test and returns it. Mounting
// needs root (CAP_SYS_ADMIN), which containers may refuse: the test is then skipped, saying why,
// except in CI (CI set, as .ci/run sets it), where a test that did not happen fails.
func smallDisk(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		msg := fmt.Sprintf("cannot mount a %d-byte tmpfs to fill (%v): this test needs root, or CAP_SYS_ADMIN, to run", size, err)
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, syscall.MNT_DETACH); err != nil {
			t.Errorf("unmounting %s: %v", dir, err)
		}
	})
	return dir
}

// fillTo writes the file path until the disk it is on has at most room bytes free. It may run
// outside the test's goroutine.
func fillTo(t *testing.T, path string, room int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		t.Error(err)
		return
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		var st syscall.Statfs_t
		if err := syscall.Statfs(filepath.Dir(path), &st); err != nil {
			t.Error(err)
			return
		}
		free := int64(st.Bavail) * st.Bsize
		if free <= room {
			return
		}
		if _, err := f.Write(buf[:min(int64(len(buf)), free-room)]); errors.Is(err, syscall.ENOSPC) {
			return
		} else if err != nil {
			t.Error(err)
			return
		}
	}
}

// TestRealFullDiskAtEveryStep fills a real disk (a small tmpfs) under producers, round after
// round, with the space back in between, while the queue checkpoints every few milliseconds,
// starts a segment every 16 KiB and compacts eagerly: the disk fills in the middle of a batch, of
// a checkpoint edit, of a segment's start or a compaction's copies, wherever the producers and
// the background tasks happen to be. Every call that fails matches ErrUnavailable; once space is
// back, the queue opened again (its checkpoint ending, perhaps, in an edit cut short) holds every
// acknowledged message and delivers each, none early.
func TestRealFullDiskAtEveryStep(t *testing.T) {
	disk := smallDisk(t, 2<<20)
	dir := filepath.Join(disk, "q")
	ballast := filepath.Join(disk, "ballast")
	opts := []Option{WithSegmentSize(16 << 10), WithCheckpointInterval(5 * time.Millisecond), WithCompaction(0.9, 0)}
	a := &acked{due: make(map[string]time.Time)}
	rng := rand.New(rand.NewPCG(18, 55))
	const rounds = 6
	for round := range rounds {
		q := open(t, dir, opts...)
		errs := putUntilFailure(t, q, uint64(round)+100, a, len(a.due)+300, 3*time.Second, func() {
			fillTo(t, ballast, rng.Int64N(16<<10))
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
