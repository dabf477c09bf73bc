package delayq

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The crash test runs the test binary again as a child process (TestCrashChild, selected by
// the environment) that puts, receives, acks, nacks and cancels messages in a queue directory and
// reports each operation on stdout once it has returned. The parent kills the child with SIGKILL
// at a random moment, starts another on the same directory, and so on; then it opens the queue
// itself, drains it, and checks the reports against what was delivered:
//
//   - every message whose Put returned is delivered, unless an Ack or Cancel of it began;
//   - no message is delivered before its DeliverAt;
//   - no message is delivered by a Receive that began after an Ack of it returned;
//   - no message is delivered by a Receive that began after a Cancel of it returned true.
//
// Reports carry a sequence number the child takes from one counter, after an operation returns
// (put, ack, cancel) or before it begins (receive), so "began after returned" is exact even
// though the reports of concurrent goroutines are printed in any order.

const crashEnv = "DELAYQ_CRASH_CHILD_DIR"

func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashEnv)
	if dir == "" {
		t.Skip("run by TestCrash")
	}
	seed, _ := strconv.ParseUint(os.Getenv("DELAYQ_CRASH_SEED"), 10, 64)
	crashChild(dir, seed)
}

func crashChild(dir string, seed uint64) {
	q, err := Open(dir, WithSegmentSize(64<<10), WithCheckpointInterval(100*time.Millisecond), WithHorizon(2*time.Second),
		WithSlot(100*time.Millisecond), WithMaxAttempts(0), WithBackoff(50*time.Millisecond, 200*time.Millisecond),
		WithCompaction(0.9, 0)) // compacting eagerly, so that kills land during relocations too
	if err != nil {
		fmt.Printf("fatal %v\n", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	var seq atomic.Int64
	out := bufio.NewWriter(os.Stdout)
	report := func(format string, args ...any) {
		mu.Lock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
		mu.Unlock()
	}
	ctx := context.Background()
	ids := make(chan string, 1024)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for {
				var batch []Message
				for range 1 + rng.IntN(4) {
					delay := time.Duration(rng.IntN(5000)-500) * time.Millisecond
					batch = append(batch, Message{Topic: "t", Payload: []byte(strconv.Itoa(rng.Int())), DeliverAt: time.Now().Add(delay)})
				}
				got, err := q.PutBatch(ctx, batch)
				if err != nil {
					report("fatal put: %v", err)
					os.Exit(2)
				}
				s := seq.Add(1)
				for i, id := range got {
					report("put %s %d %d", id, batch[i].DeliverAt.UnixNano(), s)
					select {
					case ids <- id:
					default:
					}
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // canceller
		defer wg.Done()
		for id := range ids {
			report("try %s", id)
			ok, err := q.Cancel(ctx, id)
			if err != nil {
				report("fatal cancel: %v", err)
				os.Exit(2)
			}
			if ok {
				report("cancel %s %d", id, seq.Add(1))
			}
			time.Sleep(3 * time.Millisecond)
		}
	}()
	for c := range 2 {
		wg.Add(1)
		go func() { // consumers
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, 100+uint64(c)))
			for {
				start := seq.Add(1)
				ds, err := q.Receive(ctx, "t", 8, 300*time.Millisecond)
				if err != nil {
					report("fatal receive: %v", err)
					os.Exit(2)
				}
				now := time.Now().UnixNano()
				for _, d := range ds {
					report("recv %s %d %d", d.ID, now, start)
					switch r := rng.IntN(10); {
					case r < 7:
						report("try %s", d.ID)
						err := q.Ack(ctx, d.Receipt)
						if err == nil {
							report("ack %s %d", d.ID, seq.Add(1))
						} else if !errors.Is(err, ErrUnknownReceipt) {
							report("fatal ack: %v", err)
							os.Exit(2)
						}
					case r < 9:
						if err := q.Nack(ctx, d.Receipt, 20*time.Millisecond); err != nil && !errors.Is(err, ErrUnknownReceipt) {
							report("fatal nack: %v", err)
							os.Exit(2)
						}
					default: // let the lease run out
					}
				}
			}
		}()
	}
	wg.Wait()
}

// crashLog is what the parent learned from the children's reports.
type crashLog struct {
	deliverAt map[string]int64 // put returned
	acked     map[string]int64 // seq of the ack's return
	cancelled map[string]int64 // seq of the cancel's return
	tried     map[string]bool  // an ack or cancel began: it may have taken effect unreported
	recvs     []crashRecv
}

type crashRecv struct {
	id         string
	at         int64 // when Receive returned
	start      int64 // seq before Receive began; math.MaxInt64 in the final drain
	generation int   // which child (or len(children) for the drain)
}

func (l *crashLog) parse(t *testing.T, line string, gen int) {
	f := strings.Fields(line)
	num := func(i int) int64 {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			t.Fatalf("bad report %q", line)
		}
		return n
	}
	switch {
	case len(f) == 4 && f[0] == "put":
		l.deliverAt[f[1]] = num(2)
	case len(f) == 3 && f[0] == "ack":
		l.acked[f[1]] = num(2)
	case len(f) == 2 && f[0] == "try":
		l.tried[f[1]] = true
	case len(f) == 3 && f[0] == "cancel":
		l.cancelled[f[1]] = num(2)
	case len(f) == 4 && f[0] == "recv":
		l.recvs = append(l.recvs, crashRecv{id: f[1], at: num(2), start: num(3), generation: gen})
	case len(f) > 0 && f[0] == "fatal":
		t.Fatalf("child: %s", line)
	}
	// Anything else is test-framework output, or a line cut short by the kill.
}

// runUntilKilled runs the test function child of this test binary in a process of its own, with
// env added to its environment, hands each line it prints to line, and kills it with SIGKILL after
// the given time. It fails t if the child exits by itself before.
func runUntilKilled(t *testing.T, child string, env []string, after time.Duration, line func(string)) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+child+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1024)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	kill := time.After(after)
	killed := false
	for lines != nil {
		select {
		case l, ok := <-lines:
			if !ok {
				lines = nil
				break
			}
			line(l)
		case <-kill:
			cmd.Process.Signal(syscall.SIGKILL)
			killed = true
		}
	}
	err = cmd.Wait()
	if !killed {
		t.Fatalf("%s exited by itself: %v", child, err)
	}
}

func TestCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs child processes")
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("DELAYQ_CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d (set DELAYQ_CRASH_SEED to repeat)", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	l := &crashLog{deliverAt: map[string]int64{}, acked: map[string]int64{}, cancelled: map[string]int64{}, tried: map[string]bool{}}
	const rounds = 6
	for gen := range rounds {
		// The child's sequence numbers restart at 1; make them global by offsetting each child's.
		env := []string{crashEnv + "=" + dir, fmt.Sprintf("DELAYQ_CRASH_SEED=%d", seed+uint64(gen))}
		runUntilKilled(t, "TestCrashChild", env, time.Duration(150+rng.IntN(700))*time.Millisecond, func(line string) {
			l.parse(t, offsetSeq(line, int64(gen)<<40), gen)
		})
	}

	// Drain: everything put and neither acked nor cancelled must come.
	q := open(t, dir, WithMaxAttempts(0))
	defer q.Close()
	check(t, q)
	outstanding := map[string]bool{}
	for id := range l.deliverAt {
		if !l.tried[id] {
			outstanding[id] = true
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for len(outstanding) > 0 {
		ds, err := q.Receive(ctx, "t", 256, time.Minute)
		if err != nil {
			t.Fatalf("drain: %v; %d messages never delivered, e.g. %v", err, len(outstanding), firstKey(outstanding))
		}
		now := time.Now().UnixNano()
		for _, d := range ds {
			l.recvs = append(l.recvs, crashRecv{id: d.ID, at: now, start: 1 << 62, generation: rounds})
			delete(outstanding, d.ID)
		}
	}
	var nrecv [rounds + 1]int
	for _, r := range l.recvs {
		nrecv[r.generation]++
		if at, ok := l.deliverAt[r.id]; ok && r.at < at {
			t.Errorf("%s delivered %v early (child %d)", r.id, time.Duration(at-r.at), r.generation)
		}
		if s, ok := l.acked[r.id]; ok && r.start > s {
			t.Errorf("%s delivered again after its ack (child %d)", r.id, r.generation)
		}
		if s, ok := l.cancelled[r.id]; ok && r.start > s {
			t.Errorf("%s delivered after its cancel (child %d)", r.id, r.generation)
		}
	}
	t.Logf("%d puts, %d acks, %d cancels; deliveries per child and drain: %v", len(l.deliverAt), len(l.acked), len(l.cancelled), nrecv)
	if len(l.acked) == 0 || len(l.cancelled) == 0 {
		t.Errorf("the children acked %d and cancelled %d messages: the test exercised too little", len(l.acked), len(l.cancelled))
	}
}

// offsetSeq adds off to the sequence number that ends put, ack, cancel and recv reports.
func offsetSeq(line string, off int64) string {
	f := strings.Fields(line)
	if len(f) < 3 {
		return line
	}
	switch f[0] {
	case "put", "ack", "cancel", "recv":
		n, err := strconv.ParseInt(f[len(f)-1], 10, 64)
		if err != nil {
			return line
		}
		f[len(f)-1] = strconv.FormatInt(n+off, 10)
		return strings.Join(f, " ")
	}
	return line
}

func firstKey(m map[string]bool) string {
	for k := range m {
		return k
	}
	return ""
}
