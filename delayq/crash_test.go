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

	"github.com/tockwheel/tock/internal/testlong"
	"github.com/tockwheel/tock/queue"
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

// TestPurgeCrash kills, with SIGKILL at random moments, child processes (TestPurgeCrashChild)
// that put messages due a few seconds ahead on a queue whose horizon is one second, so that every
// message is rolled (written again into a later list) several times while it waits; purge the
// topic's scheduled messages, cancel some of them, and receive and ack those that come due, all at
// once. After each purge a child looks up the messages put before it began: none may still be
// scheduled.
//
// It is the regression test of a purge that came back. The one seen was no crash's doing: Purge
// read the disk wheel's lists one at a time without holding the queue's lock, and passed over a
// list the loader took meanwhile, so the messages that load rolled into the next list of the same
// wheel index, or moved into memory after Purge had swept memory, stayed (and were seen after the
// next restart). This test found it in about one run in four; TestPurgeWhileTheLoaderMovesMessages
// shows it every time. Why a crash cannot bring a purge back: a Purge record, like every record,
// changes the state through the one function that replay uses too (apply.go), and Purge returns
// only once its records are durable. A copy rolled before the Purge is in the list the Purge is
// threaded into, before it, so it is purged there in replay as live; one rolled after it was not
// purged live either, being of a list the Purge did not reach (and then Purge looks at that wheel
// index again). A crash between an Advance and its copies is replayed with the copies owed, which
// recovery writes from the list as the log holds it, Purge included.
//
// After the children, the parent opens the queue, waits until every message is due, drains it,
// and checks every delivery, in a child or in the drain, against the reports:
//   - a message is never delivered if a purge that returned began after its put returned and
//     ended before it was due (it was scheduled throughout the purge);
//   - nor by a Receive that began after a Cancel of it returned true, or after an Ack of it returned;
//   - a message is delivered if its put returned, no Cancel or Ack of it began, and no purge that
//     could have taken it began before it was due;
//   - no message is delivered before it is due.
func TestPurgeCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs child processes")
	}
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	l := &purgeLog{put: map[string]purgePut{}, acked: map[string]int64{}, cancelled: map[string]int64{}, tried: map[string]bool{}}
	rounds := testlong.Pick(6, 30)
	for gen := range rounds {
		env := []string{purgeCrashEnv + "=" + dir, fmt.Sprintf("DELAYQ_PURGE_CRASH_SEED=%d", seed+uint64(gen))}
		runUntilKilled(t, "TestPurgeCrashChild", env, time.Duration(300+rng.IntN(900))*time.Millisecond, func(line string) {
			l.parse(t, line, gen)
		})
	}
	q := open(t, dir, WithMaxAttempts(0))
	defer q.Close()
	check(t, q)
	// Drain: receive until every message that must come has come (or a minute has passed, which
	// fails the test), then whatever else is due.
	want := map[string]bool{}
	for id, p := range l.put {
		if !l.tried[id] && !l.mayBePurged(p) {
			want[id] = true
		}
	}
	for _, r := range l.recvs {
		delete(want, r.id)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	receive := func(ctx context.Context) error {
		ds, err := q.Receive(ctx, "s", 256, time.Hour)
		now := time.Now().UnixNano()
		for _, d := range ds {
			l.recvs = append(l.recvs, crashRecv{id: d.ID, at: now, start: 1 << 62, generation: rounds})
			delete(want, d.ID)
			if err := q.Ack(context.Background(), d.Receipt); err != nil {
				t.Fatal(err)
			}
		}
		return err
	}
	for len(want) > 0 {
		if err := receive(ctx); err != nil {
			break // the minute is up: want lists the messages lost
		}
	}
	var last int64
	for _, p := range l.put {
		last = max(last, p.due)
	}
	time.Sleep(time.Until(time.Unix(0, last)))
	for {
		rctx, rcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := receive(rctx)
		rcancel()
		if err != nil {
			break
		}
	}
	if ti, err := q.Topics(ctx); err != nil || len(ti) != 0 {
		t.Errorf("after the drain: topics %+v, %v", ti, err)
	}
	delivered := map[string]bool{}
	for _, r := range l.recvs {
		delivered[r.id] = true
		p, ok := l.put[r.id]
		if ok && r.at < p.due {
			t.Errorf("%s delivered %v early (child %d)", r.id, time.Duration(p.due-r.at), r.generation)
		}
		if ok && l.purgedBy(p) != nil {
			t.Errorf("%s, put at seq %d and due %v, delivered (child %d) after a purge %+v that returned", r.id, p.seq, time.Unix(0, p.due), r.generation, *l.purgedBy(p))
		}
		if s, ok := l.acked[r.id]; ok && r.start > s {
			t.Errorf("%s delivered again after its ack (child %d)", r.id, r.generation)
		}
		if s, ok := l.cancelled[r.id]; ok && r.start > s {
			t.Errorf("%s delivered after its cancel (child %d)", r.id, r.generation)
		}
	}
	purged := 0
	for id, p := range l.put {
		if !l.tried[id] && l.mayBePurged(p) && !delivered[id] {
			purged++
		}
	}
	lost := 0
	for id := range want {
		if lost++; lost <= 5 {
			p := l.put[id]
			t.Errorf("%s, put at seq %d due %v, never delivered and no purge began while it waited", id, p.seq, time.Unix(0, p.due))
		}
	}
	t.Logf("%d puts, %d purges (%d returned), %d purged, %d cancels, %d acks, %d deliveries; %d lost",
		len(l.put), len(l.purges), l.returned(), purged, len(l.cancelled), len(l.acked), len(l.recvs), lost)
	if purged == 0 || len(l.cancelled) == 0 || l.returned() == 0 {
		t.Errorf("%d purged, %d cancels, %d purges returned: the test exercised too little", purged, len(l.cancelled), l.returned())
	}
}

const purgeCrashEnv = "DELAYQ_PURGE_CRASH_DIR"

// purgeLog is what the parent of TestPurgeCrash learned from the children's reports.
type purgeLog struct {
	put       map[string]purgePut
	purges    []purgeRun
	acked     map[string]int64 // seq of the ack's return
	cancelled map[string]int64 // seq of the cancel's return
	tried     map[string]bool  // a cancel or ack began: it may have taken effect unreported
	recvs     []crashRecv
}

// A purgePut is one message put: the seqs before its put began and after it returned, and when
// it is due (Unix ns).
type purgePut struct {
	before, seq, due int64
}

// A purgeRun is one purge: the seq and time before it began, and the seq and time after it
// returned (0 if it did not: its child was killed first).
type purgeRun struct {
	seq, began, endSeq, ended int64
}

func (l *purgeLog) returned() int {
	n := 0
	for _, p := range l.purges {
		if p.ended != 0 {
			n++
		}
	}
	return n
}

// purgedBy returns a purge that returned and must have taken p, or nil.
func (l *purgeLog) purgedBy(p purgePut) *purgeRun {
	for i, r := range l.purges {
		if r.ended != 0 && r.seq > p.seq && r.ended < p.due {
			return &l.purges[i]
		}
	}
	return nil
}

// mayBePurged reports whether a purge may have taken p: it began before p was due, and did not
// return before p's put began.
func (l *purgeLog) mayBePurged(p purgePut) bool {
	for _, r := range l.purges {
		if r.began < p.due && (r.ended == 0 || r.endSeq > p.before) {
			return true
		}
	}
	return false
}

// parse reads one line of child gen. The child's sequence numbers restart at 1: they are made
// global by offsetting each child's.
func (l *purgeLog) parse(t *testing.T, line string, gen int) {
	f := strings.Fields(line)
	num := func(i int) int64 {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			t.Fatalf("bad report %q", line)
		}
		return n
	}
	seq := func(i int) int64 { return num(i) + int64(gen)<<40 }
	switch {
	case len(f) == 5 && f[0] == "put": // put ID due before seq
		l.put[f[1]] = purgePut{before: seq(3), seq: seq(4), due: num(2)}
	case len(f) == 3 && f[0] == "purge": // purge began seq
		l.purges = append(l.purges, purgeRun{seq: seq(2), began: num(1)})
	case len(f) == 4 && f[0] == "purged": // purged ended seq-of-its-begin seq
		for i := len(l.purges) - 1; i >= 0; i-- {
			if l.purges[i].seq == seq(2) {
				l.purges[i].ended, l.purges[i].endSeq = num(1), seq(3)
				break
			}
		}
	case len(f) == 3 && f[0] == "ack":
		l.acked[f[1]] = seq(2)
	case len(f) == 2 && f[0] == "try":
		l.tried[f[1]] = true
	case len(f) == 3 && f[0] == "cancel":
		l.cancelled[f[1]] = seq(2)
	case len(f) == 4 && f[0] == "recv":
		l.recvs = append(l.recvs, crashRecv{id: f[1], at: num(2), start: seq(3), generation: gen})
	case len(f) == 3 && f[0] == "missed":
		t.Errorf("%s, put before a purge began (seq %d), is still scheduled after it returned", f[1], seq(2))
	case len(f) > 0 && f[0] == "fatal":
		t.Fatalf("child: %s", line)
	}
}

func TestPurgeCrashChild(t *testing.T) {
	dir := os.Getenv(purgeCrashEnv)
	if dir == "" {
		t.Skip("run by TestPurgeCrash")
	}
	seed, _ := strconv.ParseUint(os.Getenv("DELAYQ_PURGE_CRASH_SEED"), 10, 64)
	q, err := Open(dir, WithSlot(100*time.Millisecond), WithHorizon(time.Second), WithSegmentSize(16<<10),
		WithCheckpointInterval(100*time.Millisecond), WithMaxAttempts(0), WithCompaction(0.9, 0))
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
	fatal := func(what string, err error) {
		report("fatal %s: %v", what, err)
		os.Exit(2)
	}
	ctx := context.Background()
	ids := make(chan string, 1024)
	// The last puts, with the seq after they returned, for the purger's check.
	var recent struct {
		sync.Mutex
		ids  [512]string
		seqs [512]int64
		n    int
	}
	for g := range 2 {
		go func() { // producers
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for {
				var batch []Message
				for range 1 + rng.IntN(4) {
					at := time.Now().Add(1500*time.Millisecond + time.Duration(rng.IntN(4500))*time.Millisecond)
					batch = append(batch, Message{Topic: "s", Payload: []byte(strconv.Itoa(rng.Int())), DeliverAt: at})
				}
				before := seq.Add(1)
				got, err := q.PutBatch(ctx, batch)
				if err != nil {
					fatal("put", err)
				}
				s := seq.Add(1)
				for i, id := range got {
					report("put %s %d %d %d", id, batch[i].DeliverAt.UnixNano(), before, s)
					recent.Lock()
					recent.ids[recent.n%len(recent.ids)], recent.seqs[recent.n%len(recent.ids)] = id, s
					recent.n++
					recent.Unlock()
					select {
					case ids <- id:
					default:
					}
				}
				time.Sleep(time.Duration(rng.IntN(3)) * time.Millisecond)
			}
		}()
	}
	go func() { // purger
		rng := rand.New(rand.NewPCG(seed, 10))
		for {
			time.Sleep(time.Duration(50+rng.IntN(250)) * time.Millisecond)
			s := seq.Add(1)
			report("purge %d %d", time.Now().UnixNano(), s)
			if _, err := q.Purge(ctx, "s", queue.Scheduled); err != nil {
				fatal("purge", err)
			}
			report("purged %d %d %d", time.Now().UnixNano(), s, seq.Add(1))
			// What was scheduled when the purge began is gone now, wherever it moved meanwhile.
			var before []string
			recent.Lock()
			for i := range min(recent.n, len(recent.ids)) {
				if recent.seqs[i] < s {
					before = append(before, recent.ids[i])
				}
			}
			recent.Unlock()
			for _, id := range before {
				if m, err := q.Message(ctx, id); err == nil && m.State == queue.Scheduled {
					report("missed %s %d", id, s)
				}
			}
		}
	}()
	go func() { // canceller
		for id := range ids {
			report("try %s", id)
			ok, err := q.Cancel(ctx, id)
			if err != nil {
				fatal("cancel", err)
			}
			if ok {
				report("cancel %s %d", id, seq.Add(1))
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	for { // consumer
		start := seq.Add(1)
		ds, err := q.Receive(ctx, "s", 16, time.Minute)
		if err != nil {
			fatal("receive", err)
		}
		now := time.Now().UnixNano()
		for _, d := range ds {
			report("recv %s %d %d", d.ID, now, start)
			report("try %s", d.ID)
			if err := q.Ack(ctx, d.Receipt); err != nil {
				fatal("ack", err)
			}
			report("ack %s %d", d.ID, seq.Add(1))
		}
	}
}
