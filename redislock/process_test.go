package redislock

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/internal/redistest"
)

// Environment of the helper process of TestHolderProcessKilled.
const (
	helperAddrEnv    = "REDISLOCK_HELPER_ADDR"
	helperTimeoutEnv = "REDISLOCK_HELPER_TIMEOUT"
)

// TestHelperProcess is not a test: run by TestHolderProcessKilled as a child process, it takes a
// watchdog lock, reports its token on stdout and holds the lock until it is killed.
func TestHelperProcess(t *testing.T) {
	addr := os.Getenv(helperAddrEnv)
	if addr == "" {
		t.Skip("helper process for TestHolderProcessKilled")
	}
	timeout, err := time.ParseDuration(os.Getenv(helperTimeoutEnv))
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	l := New(redis.NewClient(&redis.Options{Addr: addr}), WithWatchdogTimeout(timeout))
	lk, err := l.Lock(context.Background(), "job")
	for errors.Is(err, ErrSlowReply) { // a loaded machine answered later than the lease lasts
		lk, err = l.Lock(context.Background(), "job")
	}
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	fmt.Println("locked", lk.Token())
	<-lk.Lost()
	fmt.Println("lost")
	os.Exit(3)
}

// TestHolderProcessKilled runs a holder in a child process, checks that its watchdog keeps the lock
// over several leases, kills it with SIGKILL and checks that the lock becomes free when the lease
// runs out, no earlier.
//
// A loaded machine can keep the child from renewing in time, and the lease then runs out as it
// should: the child must then say its lock is lost, and the test runs again with a lease twice as
// long, since the kill would no longer come while it holds the lock.
func TestHolderProcessKilled(t *testing.T) {
	s := redistest.Start(t)
	for timeout := 600 * time.Millisecond; timeout <= 4800*time.Millisecond; timeout *= 2 {
		if holderProcessKilled(t, s, timeout) {
			return
		}
		t.Logf("the child lost its %v lease before the kill (it says so): again with a longer one", timeout)
	}
	t.Fatal("the child never kept a lease up to 4.8 s for three leases: the machine never ran its renewals")
}

// holderProcessKilled is a round of TestHolderProcessKilled with a watchdog timeout of timeout. It
// returns false if the child lost its lock before the kill.
func holderProcessKilled(t *testing.T, s *redistest.Server, timeout time.Duration) bool {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperAddrEnv+"="+s.Addr, helperTimeoutEnv+"="+timeout.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	lines := make(chan string, 4)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	if line := <-lines; !strings.HasPrefix(line, "locked") {
		t.Fatalf("helper process: %q", line)
	}

	l := newLocker(t, s, WithWatchdogTimeout(timeout))
	ctx := context.Background()
	// Three leases of waiting: the child's watchdog must keep the lock all along, or know it lost it.
	wctx, cancel := context.WithTimeout(ctx, 3*timeout)
	lk, err := l.Lock(wctx, "job")
	cancel()
	if err == nil {
		// The lease ran out: the child's renewals were late, and its Lost must say so (at once: it
		// closes no later than Redis frees the key; a minute bounds a child that never says it).
		select {
		case line, ok := <-lines:
			if !ok || line != "lost" {
				t.Fatalf("acquired the lock while the child held it, and the child says %q, not that it lost it", line)
			}
		case <-time.After(time.Minute):
			t.Fatal("acquired the lock while the child held it, and the child does not say it lost it")
		}
		if err := lk.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		return false
	}
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock while the child holds the lock: err = %v, want DeadlineExceeded", err)
	}

	rdb := newClient(t, s)
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	killed := time.Now()
	ttl := rdb.PTTL(ctx, lockKey("job")).Val()
	if ttl <= 0 {
		return false // the lease ran out as the child was killed: no lease left to wait out
	}
	// The waiter has no release message to wait for: its fallback timer, set to the dead holder's
	// remaining time to live, must get it the lock when the lease ends (and not only when the
	// context ends, which would fail the Lock).
	wctx, cancel = context.WithTimeout(ctx, 10*timeout+time.Minute)
	defer cancel()
	lk, err = l.Lock(wctx, "job")
	if err != nil {
		t.Fatalf("Lock after the holder was killed: %v", err)
	}
	waited := time.Since(killed)
	if waited < ttl-10*time.Millisecond {
		t.Fatalf("acquired %v after the kill, before the lease's %v ran out", waited, ttl)
	}
	t.Logf("lease left at kill %v, acquired after %v", ttl, waited)
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	return true
}
