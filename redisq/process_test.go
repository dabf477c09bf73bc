package redisq

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/tockwheel/tock/internal/redistest"
	"github.com/tockwheel/tock/queue"
	"github.com/tockwheel/tock/redislock"
)

// The environment of the helper process (TestHelperProcess).
const (
	helperRoleEnv   = "REDISQ_HELPER_ROLE"
	helperAddrEnv   = "REDISQ_HELPER_ADDR"
	helperPrefixEnv = "REDISQ_HELPER_PREFIX"
)

// helperOptions are the options of the queues of the process tests, in both processes.
func helperOptions() []Option {
	return []Option{WithShards(1), WithOwnerLease(600 * time.Millisecond), WithMaxAttempts(2),
		WithBackoff(50*time.Millisecond, 50*time.Millisecond), withGrace(200 * time.Millisecond)}
}

// TestHelperProcess is not a test: the process tests run it as a child process, in a role:
//
//   - consumer: receives one message of topic t with a visibility of 300ms, prints "received <id>
//     <attempt>" and kills itself with SIGKILL, as a consumer that crashes;
//   - owner: prints "owned <n> fenced <n> lost <n>" every 20ms until it is killed, while its queue
//     does its housekeeping.
func TestHelperProcess(t *testing.T) {
	role := os.Getenv(helperRoleEnv)
	if role == "" {
		t.Skip("helper process of the process tests")
	}
	rdb := redis.NewClient(&redis.Options{Addr: os.Getenv(helperAddrEnv)})
	ctx := context.Background()
	q, err := Open(ctx, rdb, append(helperOptions(), WithPrefix(os.Getenv(helperPrefixEnv)))...)
	if err != nil {
		fmt.Println("error", err)
		os.Exit(2)
	}
	switch role {
	case "consumer":
		called := time.Now()
		ds, err := q.Receive(ctx, "t", 1, 300*time.Millisecond)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(2)
		}
		// The lease began after called and lasts 300ms; the Receive returned at returned.
		fmt.Println("received", ds[0].ID, ds[0].Attempt, called.UnixNano(), time.Now().UnixNano())
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	case "owner":
		for {
			fmt.Println("owned", q.metrics.owned.Load(), "fenced", q.metrics.fenced.Load(), "ticks", q.metrics.ticks.Load())
			time.Sleep(20 * time.Millisecond)
		}
	}
	os.Exit(2)
}

// helper is a running helper process.
type helper struct {
	cmd   *exec.Cmd
	lines chan string
}

func startHelper(t *testing.T, role, addr, prefix string) *helper {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), helperRoleEnv+"="+role, helperAddrEnv+"="+addr, helperPrefixEnv+"="+prefix)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := &helper{cmd: cmd, lines: make(chan string, 1024)}
	go func() {
		defer close(h.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case h.lines <- sc.Text():
			default: // a status nobody reads
			}
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return h
}

// await returns the first line of h that starts with prefix, failing the test if none came within
// helperPatience.
func (h *helper) await(t *testing.T, prefix string) string {
	t.Helper()
	timeout := time.After(helperPatience)
	for {
		select {
		case line, ok := <-h.lines:
			if !ok {
				t.Fatalf("helper exited waiting for %q", prefix)
			}
			if strings.HasPrefix(line, "error") {
				t.Fatalf("helper: %s", line)
			}
			if strings.HasPrefix(line, prefix) {
				return line
			}
		case <-timeout:
			t.Fatalf("helper said no %q within %v", prefix, helperPatience)
		}
	}
}

// helperPatience bounds each wait for a helper process: a bound on a stuck helper, not a time the
// tests rely on (starting a race-enabled test binary on a loaded machine takes seconds).
const helperPatience = time.Minute

// TestConsumerProcessDies has consumers in child processes that crash while they hold a message:
// it is delivered again once each lease runs out, not before, and after the maximum number of
// failed deliveries it is a dead letter. Between the crashes this process looks, and finds nothing
// while the dead consumer's lease surely lasts; if its look runs into the lease's last millisecond
// (Redis counts leases in whole milliseconds of its own clock) and it gets the message itself,
// that is not early, but the second crash did not happen: it tries again with a new message.
func TestConsumerProcessDies(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	const tries = 5
	for try := 1; ; try++ {
		if consumersCrash(t, s) {
			return
		}
		if try == tries {
			t.Fatalf("in %d tries, this process's look got the message at the end of the dead consumer's lease each time: the second crash never happened", tries)
		}
	}
}

// consumersCrash runs TestConsumerProcessDies once on a new deployment; it returns false when
// this process got the message between the crashes, not early, so that the second did not happen.
func consumersCrash(t *testing.T, s *redistest.Server) bool {
	prefix := newPrefix()
	q := openQueue(t, singleClient(t, s.Addr), append(helperOptions(), WithPrefix(prefix))...)
	ctx := testCtx(t, 3*helperPatience)
	id, err := q.Put(ctx, queue.Message{Topic: "t", Payload: []byte("crash me")})
	if err != nil {
		t.Fatal(err)
	}
	const visibility = 300 * time.Millisecond // the helper's
	var leased time.Time                      // the earliest the last lease can have begun
	for attempt := 1; attempt <= 2; attempt++ {
		h := startHelper(t, "consumer", s.Addr, prefix)
		var gotID string
		var gotAttempt int
		var called, returned int64
		line := h.await(t, "received")
		if _, err := fmt.Sscanf(line, "received %s %d %d %d", &gotID, &gotAttempt, &called, &returned); err != nil ||
			gotID != id || gotAttempt != attempt {
			t.Fatalf("helper %q; want the delivery of %s, attempt %d", line, id, attempt)
		}
		// The earlier lease began after its Receive was called: the message may come again only
		// once the visibility timeout has passed since then.
		if again := time.Unix(0, returned).Sub(leased); attempt > 1 && again < visibility {
			t.Fatalf("delivered again %v after the crashed consumer's Receive was called; want the visibility timeout, %v", again, visibility)
		}
		leased = time.Unix(0, called)
		_ = h.cmd.Wait()
		if attempt == 2 {
			break
		}
		// Nothing comes while the dead consumer's lease surely lasts (when this process gets
		// there in time to look).
		left := time.Until(leased.Add(visibility))
		if left <= 50*time.Millisecond {
			t.Logf("attempt %d: the dead consumer's lease may have run out before this process could look", attempt)
			continue
		}
		ds, err := q.Receive(testCtx(t, left), "t", 1, time.Minute)
		if len(ds) == 0 && errors.Is(err, context.DeadlineExceeded) {
			continue
		}
		// A Receive may return what it leased after its deadline, and Redis's lease ends at its
		// whole millisecond: a delivery is early only if it came before the lease's last one.
		if got := time.Now(); len(ds) == 1 && err == nil && !got.Before(leased.Add(visibility-time.Millisecond)) {
			t.Logf("attempt %d: this process got the message %v after the dead consumer's Receive was called, as its lease ran out", attempt, got.Sub(leased))
			return false
		}
		t.Fatalf("during the dead consumer's lease: %v, %v", ds, err)
	}
	dead := receiveN(t, ctx, q, "t"+queue.DeadLetterSuffix, 1)
	if dead[0].ID != id || string(dead[0].Payload) != "crash me" {
		t.Fatalf("dead letter %q %q", dead[0].ID, dead[0].Payload)
	}
	return true
}

// ownerSetup starts a helper process that owns the only shard of a deployment with messages due
// over the next seconds, and a queue of this process on it.
func ownerSetup(t *testing.T) (*helper, *Queue, map[string]time.Time) {
	s := startServer(t)
	prefix := newPrefix()
	ctx := testCtx(t, 3*helperPatience)
	h := startHelper(t, "owner", s.Addr, prefix)
	h.await(t, "owned 0")
	q := openQueue(t, singleClient(t, s.Addr), append(helperOptions(), WithPrefix(prefix), withNoCandidacy())...)
	due := make(map[string]time.Time)
	// Due over five seconds, so that the shard has seconds to promote after the helper is gone,
	// however long it takes to take the shard on a loaded machine.
	start := time.Now().Add(1200 * time.Millisecond)
	for i := range 40 {
		at := start.Add(time.Duration(i) * 125 * time.Millisecond)
		id, err := q.Put(ctx, queue.Message{Topic: "t", DeliverAt: at})
		if err != nil {
			t.Fatal(err)
		}
		due[id] = at
	}
	// The helper is to own the shard: this process does not compete for it until then.
	h.await(t, "owned 1")
	// However long that took, one message comes due well after the helper's lease (600ms) could
	// run out once it is stopped: this process has a reason to take the shard over. Without it,
	// this process could deliver the rest in the owner's place before the lease ran out, and then
	// have nothing to take the shard for.
	at := time.Now().Add(3 * time.Second)
	id, err := q.Put(ctx, queue.Message{Topic: "t", DeliverAt: at})
	if err != nil {
		t.Fatal(err)
	}
	due[id] = at
	q.testHookNoCandidacy.Store(false)
	return h, q, due
}

// consume receives every message of due in the background, from now on; wait returns the latest
// lateness, failing the test on a message delivered twice or early.
func consume(t *testing.T, q *Queue, due map[string]time.Time) (wait func() time.Duration) {
	t.Helper()
	done := make(chan time.Duration, 1)
	go func() {
		ctx := testCtx(t, 3*helperPatience)
		var worst time.Duration
		seen := make(map[string]bool)
		for len(seen) < len(due) {
			ds, err := q.Receive(ctx, "t", len(due), time.Minute)
			now := time.Now()
			if err != nil {
				t.Errorf("Receive after %d of %d: %v", len(seen), len(due), err)
				break
			}
			for _, d := range ds {
				want, ok := due[d.ID]
				switch {
				case !ok || seen[d.ID]:
					t.Errorf("%q delivered twice or never put", d.ID)
				case now.Before(want):
					t.Errorf("%q delivered %v early", d.ID, want.Sub(now))
				}
				seen[d.ID] = true
				worst = max(worst, now.Sub(want))
				if err := q.Ack(ctx, d.Receipt); err != nil {
					t.Error(err)
				}
			}
		}
		done <- worst
	}()
	return func() time.Duration { return <-done }
}

// TestOwnerProcessKilled kills the process that owns the shard, with SIGKILL, while messages come
// due: the other process promotes them in the owner's place while the lease lasts (if any come due
// then), takes the shard over once it ran out, and delivers each once and none early. Nobody receives until the
// takeover: a waiting Receive promotes what is due itself, and would leave the shard nothing late
// to take over for.
func TestOwnerProcessKilled(t *testing.T) {
	t.Parallel()
	h, q, due := ownerSetup(t)
	if err := h.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	awaitTakeover(t, q, "killed")
	worst := consume(t, q, due)()
	t.Logf("owner killed; latest delivery %v after its due time; this process: %d acquisitions, %d fallback ticks",
		worst, q.metrics.acquisitions.Load(), q.metrics.fallbackTicks.Load())
}

// awaitTakeover waits until q has taken the shard over from the helper, stopped as what says.
func awaitTakeover(t *testing.T, q *Queue, what string) {
	t.Helper()
	deadline := time.Now().Add(helperPatience)
	for q.metrics.acquisitions.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("this process did not take the shard over from the %s one: %s", what, q.shards[0])
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestOwnerProcessPaused stops the owning process with SIGSTOP past its lease, lets the other take
// the shard over (nobody receiving meanwhile, as in TestOwnerProcessKilled), and resumes it: the
// resumed process does not act as owner (its lock is lost, and the tick script refuses its fencing
// token if it tries), and every message is delivered once.
func TestOwnerProcessPaused(t *testing.T) {
	t.Parallel()
	h, q, due := ownerSetup(t)
	if err := h.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	awaitTakeover(t, q, "paused")
	wait := consume(t, q, due)
	if err := h.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// Skip what the paused process printed before it stopped, up to its status after it resumed:
	// it owns nothing (its lock is lost, and the tick script refuses its token if it ticks before
	// it notices; see TestTickRefusesStaleFencingToken).
	line := h.await(t, "owned 0")
	worst := wait()
	t.Logf("resumed owner: %q; latest delivery %v after its due time", line, worst)
}

// TestTickRefusesStaleFencingToken plays an owner whose lease ran out and was taken by another
// process, and which ticks without having noticed: the script refuses its token and does nothing.
func TestTickRefusesStaleFencingToken(t *testing.T) {
	t.Parallel()
	s := startServer(t)
	rdb := singleClient(t, s.Addr)
	q := openQueue(t, rdb, WithShards(1))
	ctx := testCtx(t, 10*time.Second)
	l := redislock.New(rdb)
	old, err := l.TryLock(ctx, q.lay.lockName(0), redislock.WithOwner(q.owner), redislock.WithLease(100*time.Millisecond))
	for errors.Is(err, redislock.ErrSlowReply) { // a loaded machine answered after the lease
		old, err = l.TryLock(ctx, q.lay.lockName(0), redislock.WithOwner(q.owner), redislock.WithLease(100*time.Millisecond))
	}
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	cur, err := l.TryLock(ctx, q.lay.lockName(0), redislock.WithOwner("another process"))
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Unlock(ctx)
	if _, err := q.Put(ctx, queue.Message{Topic: "t", DeliverAt: time.Now().Add(2 * time.Second)}); err != nil {
		t.Fatal(err)
	}
	fenced := q.metrics.fenced.Load()
	if err := q.shards[0].tick(ctx, old, 0); err != nil {
		t.Fatal(err)
	}
	if q.metrics.fenced.Load() != fenced+1 {
		t.Fatal("the tick with a stale fencing token was not refused")
	}
	v, err := tickScript.Run(ctx, rdb, q.lay.lockedKeys(0), q.withStamp(append(q.cfgArgs(), fmt.Sprint(cur.Token()), "another process", 5000, 10)...)...).Slice()
	if err != nil || len(v) < 7 || v[6] != int64(1) {
		t.Fatalf("the current owner's tick with a lead of 5s: %v, %v; want one message promoted", v, err)
	}
}
