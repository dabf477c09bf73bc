package delayq

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
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
//   - no message is delivered by a Receive that began after a Cancel of it returned true;
//   - of the messages a Put with Replace replaces (topic r, chosen IDs, never received by the
//     children), exactly one survives each ID: delivered once, it is the message of the last
//     Replace that returned or of one that began after it, never an older one beside it, never
//     none;
//   - every message delivered, by a child or in the drain, carries exactly the headers it was put
//     with (crashHeaders derives them from its ID, and from its payload in topic r), and none if
//     it was put without.
//
// Reports carry a sequence number the child takes from one counter, after an operation returns
// (put, ack, cancel) or before it begins (receive), so "began after returned" is exact even
// though the reports of concurrent goroutines are printed in any order.

const crashEnv = "DELAYQ_CRASH_CHILD_DIR"

// A crashReporter prints the reports of a crash test's child on stdout, each line whole and at
// once, for runUntilKilled to hand to the parent. Its methods may be called from any goroutine.
type crashReporter struct {
	mu  sync.Mutex
	out *bufio.Writer
}

// report prints one line.
func (r *crashReporter) report(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	fmt.Fprintf(r.out, format+"\n", args...)
	r.out.Flush()
}

// fatal reports that what failed with err, which fails the parent, and ends the child.
func (r *crashReporter) fatal(what string, err error) {
	r.report("fatal %s: %v", what, err)
	os.Exit(2)
}

// openCrashChild opens the queue of a crash test's child in dir with opts, and returns it with
// the child's reporter; a failed Open is reported as fatal.
func openCrashChild(dir string, opts ...Option) (*Queue, *crashReporter) {
	r := &crashReporter{out: bufio.NewWriter(os.Stdout)}
	q, err := Open(dir, opts...)
	if err != nil {
		r.fatal("open", err)
	}
	return q, r
}

func TestCrashChild(t *testing.T) {
	dir := os.Getenv(crashEnv)
	if dir == "" {
		t.Skip("run by TestCrash")
	}
	seed, _ := strconv.ParseUint(os.Getenv("DELAYQ_CRASH_SEED"), 10, 64)
	crashChild(dir, seed)
}

func crashChild(dir string, seed uint64) {
	q, r := openCrashChild(dir, WithSegmentSize(64<<10), WithCheckpointInterval(100*time.Millisecond), WithHorizon(2*time.Second),
		WithSlot(100*time.Millisecond), WithMaxAttempts(0), WithBackoff(50*time.Millisecond, 200*time.Millisecond),
		WithCompaction(0.9, 0)) // compacting eagerly, so that kills land during relocations too
	report := r.report
	var seq atomic.Int64
	report("ready")
	ctx := context.Background()
	ids := make(chan string, 1024)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for n := 0; ; n++ {
				var batch []Message
				for i := range 1 + rng.IntN(4) {
					delay := time.Duration(rng.IntN(5000)-500) * time.Millisecond
					m := Message{Topic: "t", Payload: []byte(strconv.Itoa(rng.Int())), DeliverAt: time.Now().Add(delay)}
					if rng.IntN(2) == 0 { // an ID of the child's, for headers derived from it
						m.ID = fmt.Sprintf("c-%d-%d-%d-%d", seed, g, n, i)
						m.Headers = crashHeaders(m.ID, "")
					}
					batch = append(batch, m)
				}
				got, err := q.PutBatch(ctx, batch)
				if err != nil {
					r.fatal("put", err)
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
				r.fatal("cancel", err)
			}
			if ok {
				report("cancel %s %d", id, seq.Add(1))
			}
			time.Sleep(3 * time.Millisecond)
		}
	}()
	wg.Add(1)
	go func() { // replacer: each Put with Replace is a Cancel and a Put in one group
		defer wg.Done()
		rng := rand.New(rand.NewPCG(seed, 200))
		for {
			id := fmt.Sprintf("r-%d", rng.IntN(crashReplaceIDs))
			payload := fmt.Sprintf("%016x", rng.Uint64())
			delay := time.Duration(rng.IntN(4500)-500) * time.Millisecond
			report("replace %s %s", id, payload)
			m := Message{ID: id, Topic: "r", Payload: []byte(payload), Headers: crashHeaders(id, payload), DeliverAt: time.Now().Add(delay), Replace: true}
			if _, err := q.Put(ctx, m); err != nil {
				r.fatal("replace", err)
			}
			report("replaced %s %s", id, payload)
			time.Sleep(2 * time.Millisecond)
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
					r.fatal("receive", err)
				}
				now := time.Now().UnixNano()
				for _, d := range ds {
					report("recv %s %d %d", d.ID, now, start)
					if diff := headersDiff(d.Headers, crashHeaders(d.ID, "")); diff != "" {
						r.fatal("receive", fmt.Errorf("%s delivered with %s", d.ID, diff))
					}
					switch n := rng.IntN(10); {
					case n < 7:
						report("try %s", d.ID)
						err := q.Ack(ctx, d.Receipt)
						if err == nil {
							report("ack %s %d", d.ID, seq.Add(1))
						} else if !errors.Is(err, ErrUnknownReceipt) {
							r.fatal("ack", err)
						}
					case n < 9:
						if err := q.Nack(ctx, d.Receipt, 20*time.Millisecond); err != nil && !errors.Is(err, ErrUnknownReceipt) {
							r.fatal("nack", err)
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

	// replaces holds, by ID, the payloads of the Puts with Replace in the order they began, and
	// replaced the index of the last that returned (absent: none returned). inFlight is the ID of
	// a Replace begun and not returned, cutShort counts the children killed during one.
	replaces map[string][]string
	replaced map[string]int
	inFlight string
	cutShort int
}

// headersOwed reports whether the final drain must deliver a message put with headers: one whose
// put returned and no Ack or Cancel of it began.
func (l *crashLog) headersOwed() bool {
	for id := range l.deliverAt {
		if !l.tried[id] && crashHeaders(id, "") != nil {
			return true
		}
	}
	return false
}

// crashReplaceIDs is how many IDs the crash children's Puts with Replace take turns at.
const crashReplaceIDs = 16

// crashHeaders returns the headers a crash child puts on the message of topic t with ID id (payload
// ""), or on the message of a Replace (topic r) with ID id and the given payload, so that the
// parent knows from a delivery alone what it must carry. A Replace's depend on its payload too, so
// that a replacement carrying the headers of a message it replaced is told apart. An ID the queue
// generated (no "c-" or "r-") and three keys in eight get none; the others take turns at a trace
// context, several keys of every sort of value, and MaxHeaders headers of MaxHeaderKey-byte keys
// that fill MaxHeadersSize exactly, every bound at once.
func crashHeaders(id, payload string) map[string]string {
	if !strings.HasPrefix(id, "c-") && !strings.HasPrefix(id, "r-") {
		return nil
	}
	f := fnv.New64a()
	f.Write([]byte(id + " " + payload))
	sum := f.Sum64()
	traceparent := fmt.Sprintf("00-%016x%016x-%016x-01", sum, ^sum, sum>>1)
	switch sum % 8 {
	case 0, 1, 2:
		return nil
	case 3:
		h := make(map[string]string, queue.MaxHeaders)
		value := strings.Repeat(fmt.Sprintf("%016x", sum), queue.MaxHeadersSize)[:queue.MaxHeadersSize/queue.MaxHeaders-queue.MaxHeaderKey]
		for i := range queue.MaxHeaders {
			k := fmt.Sprintf("b%02d-", i)
			h[k+strings.Repeat("x", queue.MaxHeaderKey-len(k))] = value
		}
		return h
	case 4, 5:
		return map[string]string{"traceparent": traceparent, "tracestate": fmt.Sprintf("tock=%x", sum), "k": id, "p": payload, "empty": "", "text": "é\t✓ " + id}
	default:
		return map[string]string{"traceparent": traceparent, "k": id}
	}
}

// headersDiff returns "" when got holds exactly the headers of want, and otherwise the first
// difference found, cut short: headers at their bounds are 16 KiB.
func headersDiff(got, want map[string]string) string {
	if len(got) != len(want) {
		return fmt.Sprintf("%d headers, put with %d", len(got), len(want))
	}
	for k, v := range want {
		if g, ok := got[k]; !ok {
			return fmt.Sprintf("no header %.40q, put with it", k)
		} else if g != v {
			return fmt.Sprintf("header %.40q = %.40q, put with %.40q", k, g, v)
		}
	}
	return ""
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
	case len(f) == 3 && f[0] == "replace":
		l.replaces[f[1]] = append(l.replaces[f[1]], f[2])
		l.inFlight = f[1]
	case len(f) == 3 && f[0] == "replaced":
		l.replaced[f[1]] = len(l.replaces[f[1]]) - 1
		l.inFlight = ""
	case len(f) > 0 && f[0] == "fatal":
		t.Fatalf("child: %s", line)
	}
	// Anything else is test-framework output, or a line cut short by the kill.
}

// runUntilKilled runs the test function child of this test binary in a process of its own, with
// env added to its environment, hands each line it prints to line, and kills it with SIGKILL
// after the given time: counted from the moment the child prints "ready" (its Open returned), or,
// when inOpen, from its start, so that the kill may land in Open's recovery. Counting from
// "ready" keeps a loaded machine, which may take seconds to start a child, from killing every
// child before it did anything. It fails t if the child exits by itself before, or is not ready
// within readyBound: Open hung (five minutes are not a promise of Open's, but far beyond any Open of
// these small directories however loaded the machine; the parent cannot see a hung child's
// goroutines otherwise).
func runUntilKilled(t *testing.T, child string, env []string, after time.Duration, inOpen bool, line func(string)) {
	t.Helper()
	const readyBound = 5 * time.Minute
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
	var kill <-chan time.Time
	if inOpen {
		kill = time.After(after)
	}
	notReady := time.After(readyBound)
	killed, hung := false, false
	for lines != nil {
		select {
		case l, ok := <-lines:
			if !ok {
				lines = nil
				break
			}
			if l == "ready" && kill == nil {
				kill, notReady = time.After(after), nil
			}
			line(l)
		case <-kill:
			cmd.Process.Signal(syscall.SIGKILL)
			killed, kill, notReady = true, nil, nil
		case <-notReady:
			cmd.Process.Signal(syscall.SIGKILL)
			hung, notReady = true, nil
		}
	}
	err = cmd.Wait()
	switch {
	case hung:
		t.Fatalf("%s not ready %v after it started: its Open hung", child, readyBound)
	case !killed:
		t.Fatalf("%s exited by itself: %v", child, err)
	}
}

// killRounds runs the children of a crash test one after another (run runs one, with
// runUntilKilled) until at least rounds of them ran and exercised reports that they did what the
// test needs, and at most 20 times rounds. One child in four is killed counting from its start,
// so that kills land in Open's recovery too (and, on a loaded machine, before it); the others
// after their Open returned. A loaded machine thus runs more children, never fewer operations:
// the test then checks its premise, which fails only if even 20 times the rounds did too little.
func killRounds(rng *rand.Rand, rounds int, exercised func() bool, run func(gen int, inOpen bool)) int {
	gen := 0
	for ; gen < 20*rounds && (gen < rounds || !exercised()); gen++ {
		run(gen, rng.IntN(4) == 0)
	}
	return gen
}

// drainWanted receives topic's messages from q, passing each delivery to got, until every
// message of want (its ID and when it is due, in Unix ns) has come; got must delete what it
// receives from want. No lateness is promised, so a loaded machine only makes it wait longer:
// what it must tell apart from slowness is a defect. Each time a Receive waited a second for
// nothing, it looks up the wanted messages already due, and fails t if the queue no longer holds
// one (lost), or held one due at the last look and still does (a due message Receive does not
// deliver). A message the loader has not yet made due is waited for.
//
// explain, if not nil, says more of a lost message in the failure.
func drainWanted(t *testing.T, q *Queue, topic string, visibility time.Duration, want map[string]int64, got func(Delivery), explain func(id string) string) {
	t.Helper()
	ctx := context.Background()
	dueBefore := map[string]bool{}
	for len(want) > 0 {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		ds, err := q.Receive(rctx, topic, 256, visibility)
		cancel()
		for _, d := range ds {
			got(d)
		}
		if err == nil {
			continue
		}
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("drain: %v", err)
		}
		now := time.Now().UnixNano()
		due := map[string]bool{}
		for id, at := range want {
			if at > now {
				continue
			}
			m, err := q.Message(ctx, id)
			switch {
			case errors.Is(err, ErrNotFound):
				why := ""
				if explain != nil {
					why = "; " + explain(id)
				}
				t.Fatalf("drain: %s, due %v ago, is lost: the queue no longer holds it (%d messages still wanted)%s", id, time.Duration(now-at), len(want), why)
			case err != nil:
				t.Fatalf("drain: %s: %v", id, err)
			case m.State == queue.Due && dueBefore[id]:
				t.Fatalf("drain: %s has been due for a Receive of a second and was not delivered: %+v", id, m)
			case m.State == queue.Due:
				due[id] = true
			}
		}
		dueBefore = due
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
	l := &crashLog{deliverAt: map[string]int64{}, acked: map[string]int64{}, cancelled: map[string]int64{}, tried: map[string]bool{},
		replaces: map[string][]string{}, replaced: map[string]int{}}
	exercised := func() bool {
		return len(l.acked) > 0 && len(l.cancelled) > 0 && len(l.replaced) > 0 && l.headersOwed()
	}
	gens := killRounds(rng, 6, exercised, func(gen int, inOpen bool) {
		// The child's sequence numbers restart at 1; make them global by offsetting each child's.
		env := []string{crashEnv + "=" + dir, fmt.Sprintf("DELAYQ_CRASH_SEED=%d", seed+uint64(gen))}
		runUntilKilled(t, "TestCrashChild", env, time.Duration(150+rng.IntN(700))*time.Millisecond, inOpen, func(line string) {
			l.parse(t, offsetSeq(line, int64(gen)<<40), gen)
		})
		if l.inFlight != "" {
			l.cutShort++
			l.inFlight = ""
		}
	})

	// Drain: everything put and neither acked nor cancelled must come.
	q := open(t, dir, WithMaxAttempts(0))
	defer q.Close()
	check(t, q)
	outstanding := map[string]int64{}
	for id, at := range l.deliverAt {
		if !l.tried[id] {
			outstanding[id] = at
		}
	}
	withHeaders := 0 // deliveries in the drain that carried headers
	drainWanted(t, q, "t", time.Hour, outstanding, func(d Delivery) {
		l.recvs = append(l.recvs, crashRecv{id: d.ID, at: time.Now().UnixNano(), start: 1 << 62, generation: gens})
		delete(outstanding, d.ID)
		if diff := headersDiff(d.Headers, crashHeaders(d.ID, "")); diff != "" {
			t.Errorf("%s delivered in the drain with %s", d.ID, diff)
		}
		if len(d.Headers) > 0 {
			withHeaders++
		}
	}, nil)
	nrecv := make([]int, gens+1)
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
	putWithHeaders := 0
	for id := range l.deliverAt {
		if crashHeaders(id, "") != nil {
			putWithHeaders++
		}
	}
	t.Logf("%d children; %d puts (%d with headers), %d acks, %d cancels; deliveries per child and drain: %v (%d in the drain with headers)",
		gens, len(l.deliverAt), putWithHeaders, len(l.acked), len(l.cancelled), nrecv, withHeaders)
	if !exercised() {
		t.Errorf("the children acked %d, cancelled %d and replaced %d messages: the test exercised too little", len(l.acked), len(l.cancelled), len(l.replaced))
	}
	if withHeaders == 0 {
		t.Errorf("of %d puts with headers, none was delivered in the drain: their headers were not checked after a crash", putWithHeaders)
	}
	checkReplaced(t, q, l)
}

// checkReplaced drains topic r, the messages of the children's Puts with Replace, and checks that
// exactly one message survives each ID a Replace returned for, and at most one each ID whose
// Replaces were all cut short: the last that returned or one begun after it.
func checkReplaced(t *testing.T, q *Queue, l *crashLog) {
	t.Helper()
	ctx := context.Background()
	got := map[string][]string{} // payloads delivered, by ID
	drain := func(want map[string]int64) {
		drainWanted(t, q, "r", time.Hour, want, func(d Delivery) {
			got[d.ID] = append(got[d.ID], string(d.Payload))
			if diff := headersDiff(d.Headers, crashHeaders(d.ID, string(d.Payload))); diff != "" {
				t.Errorf("%s (payload %s) delivered in the drain with %s", d.ID, d.Payload, diff)
			}
			delete(want, d.ID)
		}, nil)
	}
	want := map[string]int64{}
	for id := range l.replaced {
		want[id] = 0 // held from the start: the queue must hold it at every look
	}
	drain(want)
	for id := range l.replaces { // cut short each time: its message may or may not be there
		if _, ok := l.replaced[id]; ok {
			continue
		}
		m, err := q.Message(ctx, id)
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			t.Fatal(err)
		case m.State != queue.Leased:
			want[id] = m.DeliverAt.UnixNano()
		}
	}
	drain(want)
	for id, begun := range l.replaces {
		allowed := begun
		if i, ok := l.replaced[id]; ok {
			allowed = begun[i:]
		}
		switch ps := got[id]; {
		case len(ps) > 1:
			t.Errorf("%s delivered %d times, payloads %v: both a replaced message and its replacement survived", id, len(ps), ps)
		case len(ps) == 1 && !slices.Contains(allowed, ps[0]):
			t.Errorf("%s delivered with payload %s, replaced by %v (the last that returned first)", id, ps[0], allowed)
		}
	}
	topics, err := q.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, ti := range topics {
		if ti.Topic == "r" && ti.Scheduled+ti.Due > 0 {
			t.Errorf("after every replaced ID was delivered, topic r still holds %d scheduled and %d due messages: replaced ones survived", ti.Scheduled, ti.Due)
		}
	}
	withHeaders := 0
	for id, ps := range l.replaces {
		for _, p := range ps {
			if crashHeaders(id, p) != nil {
				withHeaders++
			}
		}
	}
	t.Logf("%d IDs replaced %d times (%d with headers), %d children killed during a Replace", len(l.replaces), countAll(l.replaces), withHeaders, l.cutShort)
}

func countAll(m map[string][]string) int {
	n := 0
	for _, v := range m {
		n += len(v)
	}
	return n
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

// TestPurgeCrash kills, with SIGKILL at random moments, child processes (TestPurgeCrashChild)
// that put messages due a few seconds ahead on a queue whose horizon is one second, so that every
// message is rolled (written again into a later list) several times while it waits; purge topic
// s's scheduled messages (topic k, whose messages share s's lists, is never purged), cancel some
// of them, and receive and ack those that come due, all at once. After each purge a child looks up the messages put before it began: none may still be
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
//     could have taken it began before it was delivered: every message of k, and those of s put
//     after the last purge began;
//   - no message is delivered before it is due.
//
// A purge may take a message of s that was due before it began: Purge takes what the queue holds
// scheduled, and no lateness is promised. Under load (seen at load 25 in CI, 5 messages "lost";
// reproduced here 3 runs in 9 with three of these tests at once under -race at load 30) a message
// due while no child ran is still scheduled when the next child opens the queue, in a list its
// loader has not yet loaded, and the child's first purge, 0.8 to 3.2 s after the message was due,
// takes it. So the test no longer assumes that a purge which began after a message was due could
// not take it; the loss of a message no purge may take is checked on topic k instead.
func TestPurgeCrash(t *testing.T) {
	if testing.Short() {
		t.Skip("crash test runs child processes")
	}
	seed := testSeed(t)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := t.TempDir()
	l := &purgeLog{put: map[string]purgePut{}, acked: map[string]int64{}, cancelled: map[string]int64{}, tried: map[string]bool{}}
	gens := killRounds(rng, testlong.Pick(6, 30), func() bool { return l.returned() > 0 && len(l.cancelled) > 0 }, func(gen int, inOpen bool) {
		env := []string{purgeCrashEnv + "=" + dir, fmt.Sprintf("DELAYQ_PURGE_CRASH_SEED=%d", seed+uint64(gen))}
		runUntilKilled(t, "TestPurgeCrashChild", env, time.Duration(300+rng.IntN(900))*time.Millisecond, inOpen, func(line string) {
			l.parse(t, line, gen)
		})
	})
	q := open(t, dir, WithMaxAttempts(0))
	defer q.Close()
	check(t, q)
	// Drain: receive until every message that must come has come, then whatever else is due,
	// until the queue holds nothing.
	want := map[string]int64{}
	for id, p := range l.put {
		if !l.tried[id] && !l.mayBePurged(p) {
			want[id] = p.due
		}
	}
	for _, r := range l.recvs {
		delete(want, r.id)
	}
	receive := func(d Delivery) {
		l.recvs = append(l.recvs, crashRecv{id: d.ID, at: time.Now().UnixNano(), start: 1 << 62, generation: gens})
		delete(want, d.ID)
		if err := q.Ack(context.Background(), d.Receipt); err != nil {
			t.Fatal(err)
		}
	}
	for _, topic := range []string{"k", "s"} {
		of := map[string]int64{}
		for id, due := range want {
			if l.put[id].topic == topic {
				of[id] = due
			}
		}
		drainWanted(t, q, topic, time.Hour, of, func(d Delivery) {
			receive(d)
			delete(of, d.ID)
		}, nil)
	}
	ctx := context.Background()
	for {
		ti, err := q.Topics(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(ti) == 0 {
			break
		}
		for _, topic := range []string{"k", "s"} {
			rctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			ds, _ := q.Receive(rctx, topic, 256, time.Hour)
			cancel()
			for _, d := range ds {
				receive(d)
			}
		}
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
	t.Logf("%d children; %d puts, %d purges (%d returned), %d purged, %d cancels, %d acks, %d deliveries",
		gens, len(l.put), len(l.purges), l.returned(), purged, len(l.cancelled), len(l.acked), len(l.recvs))
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

// A purgePut is one message put: its topic, the seqs before its put began and after it returned,
// and when it is due (Unix ns).
type purgePut struct {
	topic            string
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

// purgedBy returns a purge that returned and must have taken p, or nil: one of topic s that began
// after p's put returned and returned before p was due (p was scheduled throughout it).
func (l *purgeLog) purgedBy(p purgePut) *purgeRun {
	if p.topic != "s" {
		return nil
	}
	for i, r := range l.purges {
		if r.ended != 0 && r.seq > p.seq && r.ended < p.due {
			return &l.purges[i]
		}
	}
	return nil
}

// mayBePurged reports whether a purge may have taken p: p is of topic s, and a purge did not
// return before p's put began. When the purge began does not matter: the queue may hold a message
// scheduled past its due time (see TestPurgeCrash).
func (l *purgeLog) mayBePurged(p purgePut) bool {
	if p.topic != "s" {
		return false
	}
	for _, r := range l.purges {
		if r.ended == 0 || r.endSeq > p.before {
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
	case len(f) == 6 && f[0] == "put": // put ID topic due before seq
		l.put[f[1]] = purgePut{topic: f[2], before: seq(4), seq: seq(5), due: num(3)}
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
	q, r := openCrashChild(dir, WithSlot(100*time.Millisecond), WithHorizon(time.Second), WithSegmentSize(16<<10),
		WithCheckpointInterval(100*time.Millisecond), WithMaxAttempts(0), WithCompaction(0.9, 0))
	report, fatal := r.report, r.fatal
	var seq atomic.Int64
	report("ready")
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
				topic := []string{"s", "k"}[rng.IntN(2)]
				for range 1 + rng.IntN(4) {
					at := time.Now().Add(1500*time.Millisecond + time.Duration(rng.IntN(4500))*time.Millisecond)
					batch = append(batch, Message{Topic: topic, Payload: []byte(strconv.Itoa(rng.Int())), DeliverAt: at})
				}
				before := seq.Add(1)
				got, err := q.PutBatch(ctx, batch)
				if err != nil {
					fatal("put", err)
				}
				s := seq.Add(1)
				for i, id := range got {
					report("put %s %s %d %d %d", id, topic, batch[i].DeliverAt.UnixNano(), before, s)
					if topic == "s" {
						recent.Lock()
						recent.ids[recent.n%len(recent.ids)], recent.seqs[recent.n%len(recent.ids)] = id, s
						recent.n++
						recent.Unlock()
					}
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
	for i := 0; ; i++ { // consumer
		start := seq.Add(1)
		rctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond) // then the other topic
		ds, err := q.Receive(rctx, []string{"s", "k"}[i%2], 16, time.Minute)
		cancel()
		if err != nil && !errors.Is(err, context.DeadlineExceeded) {
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
