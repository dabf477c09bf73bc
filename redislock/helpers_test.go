package redislock

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/internal/redistest"
)

// newClient returns a client of its own for s, as a separate process would have.
func newClient(t testing.TB, s *redistest.Server) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}

// newLocker returns a Locker with a client of its own.
func newLocker(t testing.TB, s *redistest.Server, opts ...Option) *Locker {
	t.Helper()
	return New(newClient(t, s), opts...)
}

// commandCalls returns how many times clients sent Redis cmd (lower case, e.g. "evalsha") since
// it started: the calls it ran, failed ones included, plus those it rejected (as for a missing
// permission).
func commandCalls(t testing.TB, rdb *redis.Client, cmd string) int64 {
	t.Helper()
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		var total int64
		for _, field := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(field, "=")
			if k == "calls" || k == "rejected_calls" {
				n, err := strconv.ParseInt(v, 10, 64)
				if err != nil {
					t.Fatalf("commandstats line %q: %v", line, err)
				}
				total += n
			}
		}
		return total
	}
	return 0
}

// scriptCalls returns how many scripts clients asked Redis to run, by source (EVAL) or by hash
// (EVALSHA), since it started; see commandCalls.
func scriptCalls(t testing.TB, rdb *redis.Client) int64 {
	t.Helper()
	return commandCalls(t, rdb, "eval") + commandCalls(t, rdb, "evalsha")
}

// isClosed reports whether c is closed, without waiting.
func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// notifyWaits makes l report on the returned channel each time one of its Lock calls starts to
// wait; the channel holds up to n unread reports and further ones are dropped.
func notifyWaits(l *Locker, n int) <-chan struct{} {
	waiting := make(chan struct{}, n)
	l.testHookWait = func() {
		select {
		case waiting <- struct{}{}:
		default:
		}
	}
	return waiting
}

// lockThenUnlock locks name with l in a goroutine, unlocks it once acquired, and reports the
// first error on the returned channel, or nil.
func lockThenUnlock(ctx context.Context, l *Locker, name string) <-chan error {
	got := make(chan error, 1)
	go func() {
		lk, err := l.Lock(ctx, name)
		if err == nil {
			err = lk.Unlock(ctx)
		}
		got <- err
	}()
	return got
}

// reuseTokenAfterRestart acquires name with a, restarts s without persistence, and acquires name
// with b, which gets a's token again; it returns both locks. Tokens do not repeat across a restart
// by themselves (the first token of a name is Redis's clock), so the fence key is written back as
// a restore of a stale backup taken in the same process would leave it: with the token before a's
// and the restarted server's epoch. It stands for whatever makes a token repeat, which the scripts
// must survive by comparing owners too.
func reuseTokenAfterRestart(t *testing.T, s *redistest.Server, a, b *Locker, name string) (old, reused *Lock) {
	t.Helper()
	ctx := context.Background()
	old, err := a.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	s.Restart()
	setNextToken(t, newClient(t, s), name, old.Token())
	reused, err = b.TryLock(ctx, name)
	if err != nil {
		t.Fatal(err)
	}
	if reused.Token() != old.Token() {
		t.Fatalf("token after the restart %d, want the reused %d", reused.Token(), old.Token())
	}
	return old, reused
}

// setNextToken writes name's fence key so that the next acquisition on rdb's server gets token.
func setNextToken(t *testing.T, rdb *redis.Client, name string, token int64) {
	t.Helper()
	ctx := context.Background()
	err := rdb.HSet(ctx, fenceKey(name), "last", token-1, "epoch", serverEpoch(t, rdb)).Err()
	if err != nil {
		t.Fatal(err)
	}
}

// serverEpoch returns the epoch the acquire script records in fence keys on rdb's server.
func serverEpoch(t *testing.T, rdb *redis.Client) string {
	t.Helper()
	repl, err := rdb.Info(context.Background(), "replication").Result()
	if err != nil {
		t.Fatal(err)
	}
	return infoField(repl, "master_replid")
}

// infoField returns the value of field in the text of an INFO reply.
func infoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}
