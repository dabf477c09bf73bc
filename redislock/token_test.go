package redislock

import (
	"context"
	"testing"

	"github.com/tockwheel/tock/internal/redistest"
)

// TestTokensIncreaseAcrossRestart restarts Redis without persistence, which loses every fence key:
// the next token of a name must still be above every token before, so that a store fenced with
// the old tokens accepts the new holder and refuses the old one.
func TestTokensIncreaseAcrossRestart(t *testing.T) {
	s := redistest.Start(t)
	l := newLocker(t, s)
	ctx := context.Background()
	var last int64
	for range 3 {
		lk, err := l.TryLock(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if lk.Token() <= last {
			t.Fatalf("token %d after %d", lk.Token(), last)
		}
		last = lk.Token()
		s.Restart()
	}
}

// TestTokensIncreaseAfterStaleFenceRestored restores a name's fence key from a stale backup, as a
// restart that replays an AOF missing its last second would leave it: the acquisitions since the
// backup are forgotten, but their tokens must not be handed out again.
func TestTokensIncreaseAfterStaleFenceRestored(t *testing.T) {
	s := redistest.Start(t)
	l := newLocker(t, s)
	ctx := context.Background()
	rdb := newClient(t, s)
	acquire := func() int64 {
		t.Helper()
		lk, err := l.TryLock(ctx, "job")
		if err != nil {
			t.Fatal(err)
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		return lk.Token()
	}
	acquire()
	backup, err := rdb.Dump(ctx, fenceKey("job")).Result()
	if err != nil {
		t.Fatal(err)
	}
	acquire()
	forgotten := acquire()
	s.Restart()
	if err := rdb.Restore(ctx, fenceKey("job"), 0, backup).Err(); err != nil {
		t.Fatal(err)
	}
	if got := acquire(); got <= forgotten {
		t.Fatalf("token %d after the restore, not above the forgotten %d", got, forgotten)
	}
}
