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
// runs out, no earlier and not much later.
func TestHolderProcessKilled(t *testing.T) {
	s := redistest.Start(t)
	const timeout = 600 * time.Millisecond
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
	lines := bufio.NewScanner(out)
	var line string
	for lines.Scan() {
		if line = lines.Text(); strings.HasPrefix(line, "locked") || strings.HasPrefix(line, "error") {
			break
		}
	}
	if !strings.HasPrefix(line, "locked") {
		t.Fatalf("helper process: %q", line)
	}

	l := newLocker(t, s, WithWatchdogTimeout(timeout))
	ctx := context.Background()
	// Three leases of waiting: the child's watchdog must keep the lock all along.
	wctx, cancel := context.WithTimeout(ctx, 3*timeout)
	_, err = l.Lock(wctx, "job")
	cancel()
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
		t.Fatalf("PTTL right after the kill = %v: the child did not hold the lock", ttl)
	}
	// The waiter has no release message to wait for: its fallback timer, set to the dead holder's
	// remaining time to live, must get it the lock when the lease ends.
	wctx, cancel = context.WithTimeout(ctx, 10*timeout)
	defer cancel()
	lk, err := l.Lock(wctx, "job")
	if err != nil {
		t.Fatalf("Lock after the holder was killed: %v", err)
	}
	waited := time.Since(killed)
	if waited < ttl-10*time.Millisecond {
		t.Fatalf("acquired %v after the kill, before the lease's %v ran out", waited, ttl)
	}
	if waited > ttl+time.Second {
		t.Fatalf("acquired %v after the kill; the lease ran out after %v", waited, ttl)
	}
	t.Logf("lease left at kill %v, acquired after %v", ttl, waited)
	if err := lk.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
