package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/client"
	"github.com/tockwheel/tock/queue"
)

// These tests build tockd and run it as a child process, the way users do.

var build struct {
	once sync.Once
	path string
	err  error
	dir  string
}

// tockdBinary builds tockd once per test run.
func tockdBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs tockd; skipped with -short")
	}
	build.once.Do(func() {
		build.dir, build.err = os.MkdirTemp("", "tockd-e2e-")
		if build.err != nil {
			return
		}
		build.path = filepath.Join(build.dir, "tockd")
		out, err := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", build.path, ".").CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if build.dir != "" {
		os.RemoveAll(build.dir)
	}
	os.Exit(code)
}

// A daemon is a running tockd.
type daemon struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{} // closed when the process has exited
	err  error         // Wait's error, set before done closes

	mu  sync.Mutex
	log strings.Builder
}

var listening = regexp.MustCompile(`msg="tockd listening" addr=(\S+)`)

// startTockd starts tockd on a free loopback port with its data in dir (no
// -data if dir is empty) and waits until it listens. The process is killed at the end of the test if
// it is still running.
func startTockd(t *testing.T, dir string, env []string, args ...string) *daemon {
	t.Helper()
	return startTockdWithFiles(t, 0, dir, env, args...)
}

// startTockdWithFiles is startTockd with the open-files limit of the
// process set to files (0: the test's own).
func startTockdWithFiles(t *testing.T, files int, dir string, env []string, args ...string) *daemon {
	t.Helper()
	bin := tockdBinary(t)
	if dir != "" {
		args = append([]string{"-data", dir}, args...)
	}
	args = append([]string{"-addr", "127.0.0.1:0"}, args...)
	cmd := exec.Command(bin, args...)
	if files > 0 {
		// The shell sets the limit and execs tockd in its place, keeping
		// the pid that the tests signal.
		cmd = exec.Command("/bin/sh", append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$0" "$@"`, files), bin}, args...)...)
	}
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemon{cmd: cmd, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			d.mu.Lock()
			d.log.WriteString(line + "\n")
			d.mu.Unlock()
			if m := listening.FindStringSubmatch(line); m != nil {
				addr <- m[1]
			}
		}
		d.err = cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-d.done
		if t.Failed() {
			t.Logf("tockd log:\n%s", d.logs())
		}
	})
	select {
	case a := <-addr:
		d.url = "http://" + a
	case <-d.done:
		t.Fatalf("tockd exited before listening: %v\n%s", d.err, d.logs())
	case <-time.After(30 * time.Second):
		t.Fatalf("tockd did not listen within 30s\n%s", d.logs())
	}
	return d
}

func (d *daemon) logs() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.log.String()
}

// exitCode waits up to timeout for the process to exit and returns its code.
func (d *daemon) exitCode(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-d.done:
	case <-time.After(timeout):
		t.Fatalf("tockd still running %v after the signal\n%s", timeout, d.logs())
	}
	var ee *exec.ExitError
	if errors.As(d.err, &ee) {
		return ee.ExitCode()
	}
	if d.err != nil {
		t.Fatal(d.err)
	}
	return 0
}

func (d *daemon) client(t *testing.T, opts ...client.Option) *client.Client {
	t.Helper()
	c, err := client.New(d.url, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// TestEndToEnd drives every route of a real tockd through the Go client.
func TestEndToEnd(t *testing.T) {
	d := startTockd(t, t.TempDir(), nil)
	driveEveryRoute(t, d, "tock_fsync_duration_seconds_count")
}

// driveEveryRoute drives every route of d, a fresh tockd, through the Go
// client, and checks that /metrics has metric, one of the engine's own.
func driveEveryRoute(t *testing.T, d *daemon, metric string) {
	t.Helper()
	c := d.client(t)
	ctx := ctxFor(t, time.Minute)

	if err := c.Healthy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := c.Put(ctx, "orders", client.Message{Payload: json.RawMessage(`{"order":7}`)})
	if err != nil {
		t.Fatal(err)
	}
	later, err := c.Put(ctx, "orders", client.Message{ID: "later-1", Delay: time.Hour})
	if err != nil || later.ID != "later-1" || time.Until(later.DeliverAt) < 59*time.Minute {
		t.Fatalf("put with delay: %+v, %v", later, err)
	}
	ids, err := c.PutBatch(ctx, "orders", []client.Message{
		{Payload: json.RawMessage(`"a"`)},
		{Payload: json.RawMessage(`"b"`), DeliverAt: time.Now().Add(-time.Minute)},
		{ID: "later-2", Delay: 2 * time.Hour},
	})
	if err != nil || len(ids) != 3 {
		t.Fatalf("batch: %v, %v", ids, err)
	}

	ok, err := c.Cancel(ctx, "later-2")
	if err != nil || !ok {
		t.Fatalf("cancel: %v, %v", ok, err)
	}
	if ok, err = c.Cancel(ctx, "later-2"); err != nil || ok {
		t.Fatalf("second cancel: %v, %v; want false, nil", ok, err)
	}

	ds, err := c.Receive(ctx, "orders", client.ReceiveOptions{Max: 10, Wait: 5 * time.Second, Visibility: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, dl := range ds {
		got[dl.ID] = string(dl.Payload)
		if dl.Attempt != 1 || dl.Receipt == "" {
			t.Errorf("delivery %+v", dl)
		}
	}
	want := map[string]string{res.ID: `{"order":7}`, ids[0]: `"a"`, ids[1]: `"b"`}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("received %v, want %v", got, want)
	}

	// Nack one: due again at once, on attempt 2. Ack the rest.
	var acks []string
	for _, dl := range ds {
		if dl.ID == res.ID {
			if err := c.Nack(ctx, dl.Receipt, 0); err != nil {
				t.Fatal(err)
			}
		} else {
			acks = append(acks, dl.Receipt)
		}
	}
	if err := c.Ack(ctx, acks...); err != nil {
		t.Fatal(err)
	}
	ds, err = c.Receive(ctx, "orders", client.ReceiveOptions{Wait: 10 * time.Second})
	if err != nil || len(ds) != 1 || ds[0].ID != res.ID || ds[0].Attempt != 2 {
		t.Fatalf("redelivery after nack: %+v, %v", ds, err)
	}
	if err := c.Ack(ctx, ds[0].Receipt); err != nil {
		t.Fatal(err)
	}

	st, err := c.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Puts != 5 || st.Deliveries != 4 || st.Acks != 3 || st.Nacks != 1 || st.Cancels != 1 || st.Scheduled != 1 {
		t.Errorf("stats %+v; want 5 puts, 4 deliveries, 3 acks, 1 nack, 1 cancel, 1 scheduled", st)
	}
	// The status page's wheel: later-1, due in an hour, is in the hour's forecast.
	f, err := c.Forecast(ctx, client.MaxForecast)
	if err != nil {
		t.Fatal(err)
	}
	at := slices.IndexFunc(f.Due, func(n int) bool { return n > 0 })
	if total := sum(f.Due); total != 1 || f.Start+int64(at) != later.DeliverAt.Unix() {
		t.Errorf("forecast from %d: %d messages, the first at +%d s; want later-1 alone, at %d", f.Start, total, at, later.DeliverAt.Unix())
	}

	for _, get := range []struct{ path, want string }{
		{"/metrics", "tock_puts_total 5"}, {"/metrics", metric}, {"/", "<canvas"},
	} {
		resp, err := http.Get(d.url + get.path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(body), get.want) {
			t.Errorf("GET %s: %d, want 200 with %q", get.path, resp.StatusCode, get.want)
		}
	}
}

// TestBadInputE2E checks that a real tockd answers a client's mistakes with
// a 4xx and a JSON error, and stays up.
func TestBadInputE2E(t *testing.T) {
	d := startTockd(t, t.TempDir(), nil)
	for _, tc := range []struct {
		method, path, body string
		status             int
	}{
		{"POST", "/v1/topics/jobs/messages", `{"payload":`, 400},
		{"POST", "/v1/topics/jobs/messages", `{"payload":1,"color":"red"}`, 400},
		{"POST", "/v1/topics/jobs/messages", `{"delay":"-1s"}`, 400},
		{"POST", "/v1/topics/jobs/messages", `{"delay":"1s","deliver_at":"2030-01-01T00:00:00Z"}`, 400},
		{"POST", "/v1/topics/no%20spaces/messages", `{}`, 400},
		{"POST", "/v1/topics/jobs/messages", `{"payload":"` + strings.Repeat("x", 1<<20+1) + `"}`, 413},
		{"POST", "/v1/ack", `{"receipts":["0123456789abcdef0123456789abcdef"]}`, 400},
		{"POST", "/v1/nack", `{"receipt":"forged"}`, 400},
		{"DELETE", "/v1/messages/nobody", ``, 404},
		{"GET", "/v1/topics/jobs/receive", ``, 405},
		{"GET", "/v1/topics/jobs/messages", ``, 400}, // the page of messages names its state
		{"POST", "/v1/topics//messages", `{}`, 400},
		{"POST", "/v1/topics/../messages", `{}`, 400},
		{"POST", "/v1/topics/jobs/messages", `text`, 415},
		{"POST", "/v1/topics/jobs/messages", `{}`, 403},
	} {
		req, _ := http.NewRequest(tc.method, d.url+tc.path, strings.NewReader(tc.body))
		switch tc.status {
		case 415:
			req.Header.Set("Content-Type", "text/plain")
		case 403:
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Origin", "http://evil.example")
			req.Header.Set("Sec-Fetch-Site", "cross-site")
		default:
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e struct {
			Error string `json:"error"`
		}
		err = json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != tc.status || err != nil || e.Error == "" {
			t.Errorf("%s %s: %d %q (%v), want %d with a JSON error", tc.method, tc.path, resp.StatusCode, e.Error, err, tc.status)
		}
	}
	if err := d.client(t).Ready(ctxFor(t, 10*time.Second)); err != nil {
		t.Fatalf("tockd not ready after bad input: %v", err)
	}
}

func TestAuthE2E(t *testing.T) {
	d := startTockd(t, t.TempDir(), []string{"TOCK_TOKEN=tok-123"})
	ctx := ctxFor(t, 30*time.Second)
	if _, err := d.client(t).Put(ctx, "a", client.Message{}); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("put without token: %v, want ErrUnauthorized", err)
	}
	if _, err := d.client(t, client.WithToken("nope")).Stats(ctx); !errors.Is(err, client.ErrUnauthorized) {
		t.Fatalf("stats with a wrong token: %v, want ErrUnauthorized", err)
	}
	if err := d.client(t).Healthy(ctx); err != nil {
		t.Fatalf("healthz needs no token: %v", err)
	}
	if _, err := d.client(t, client.WithToken("tok-123")).Put(ctx, "a", client.Message{}); err != nil {
		t.Fatalf("put with the token: %v", err)
	}
	// -token overrides the environment.
	d2 := startTockd(t, t.TempDir(), []string{"TOCK_TOKEN=tok-123"}, "-token", "other")
	if _, err := d2.client(t, client.WithToken("other")).Stats(ctx); err != nil {
		t.Fatalf("stats with the -token: %v", err)
	}
}

// TestSIGTERM checks the graceful shutdown: a long poll in flight is
// answered at once, the process exits 0, and what was pending is there
// after a restart.
func TestSIGTERM(t *testing.T) {
	dir := t.TempDir()
	d := startTockd(t, dir, nil)
	c := d.client(t)
	ctx := ctxFor(t, time.Minute)
	ids, err := c.PutBatch(ctx, "later", []client.Message{{Delay: time.Hour}, {Delay: 2 * time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	polled := make(chan error, 1)
	go func() {
		_, err := c.Receive(ctx, "idle", client.ReceiveOptions{Wait: 20 * time.Second})
		polled <- err
	}()
	waitInFlight(t, d, `tock_http_requests_in_flight{route="POST /v1/topics/{topic}/receive"} 1`)
	start := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if code := d.exitCode(t, 15*time.Second); code != 0 {
		t.Fatalf("exit code %d after SIGTERM\n%s", code, d.logs())
	}
	if err := <-polled; err != nil {
		t.Errorf("long poll in flight at SIGTERM: %v, want an empty answer", err)
	}
	// A poll waited out would keep the process 20 s (the longest poll the server allows): half of
	// that bounds the shutdown.
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("shutdown took %v: the long poll was waited out", took)
	}
	if !strings.Contains(d.logs(), "queue closed") {
		t.Errorf("no sign the queue was closed:\n%s", d.logs())
	}

	d = startTockd(t, dir, nil)
	c = d.client(t)
	for _, id := range ids {
		if ok, err := c.Cancel(ctx, id); err != nil || !ok {
			t.Errorf("message %s after restart: cancel = %v, %v; want it pending", id, ok, err)
		}
	}
}

// TestKill9LosesNothing puts messages due over the next few seconds, kills
// tockd with SIGKILL right after the last put returned, restarts it and
// checks that every message is delivered, none before it was due, and none
// that was cancelled.
func TestKill9LosesNothing(t *testing.T) {
	dir := t.TempDir()
	d := startTockd(t, dir, nil)
	c := d.client(t)
	ctx := ctxFor(t, 2*time.Minute)

	due := map[string]time.Time{}
	base := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				delay := time.Duration((w*25+i)%30) * 100 * time.Millisecond
				res, err := c.Put(ctx, "k9", client.Message{Delay: delay, Payload: json.RawMessage(fmt.Sprint(w*25 + i))})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				due[res.ID] = res.DeliverAt
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	batch := make([]client.Message, 100)
	for i := range batch {
		batch[i] = client.Message{DeliverAt: base.Add(time.Duration(i%20) * 150 * time.Millisecond)}
	}
	batchStart := time.Now()
	ids, err := c.PutBatch(ctx, "k9", batch)
	if err != nil {
		t.Fatal(err)
	}
	// A deliver_at already past at the put is due at the put.
	batchDone := time.Now()
	asked := map[string]time.Time{}
	for i, id := range ids {
		due[id] = batch[i].DeliverAt
		asked[id] = batch[i].DeliverAt
	}
	cancelled, err := c.Put(ctx, "k9", client.Message{Delay: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := c.Cancel(ctx, cancelled.ID); !ok || err != nil {
		t.Fatalf("cancel: %v, %v", ok, err)
	}
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-d.done

	d = startTockd(t, dir, nil)
	c = d.client(t)
	got := map[string]int{}
	deadline := time.Now().Add(30 * time.Second)
	for len(got) < len(due) && time.Now().Before(deadline) {
		ds, err := c.Receive(ctx, "k9", client.ReceiveOptions{Max: 100, Wait: 5 * time.Second, Visibility: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		now := time.Now()
		var receipts []string
		for _, dl := range ds {
			want, ok := due[dl.ID]
			switch {
			case dl.ID == cancelled.ID:
				t.Errorf("cancelled message %s delivered", dl.ID)
			case !ok:
				t.Errorf("unknown message %s delivered", dl.ID)
			case now.Before(want):
				t.Errorf("message %s delivered at %v, before it was due at %v", dl.ID, now, want)
			case asked[dl.ID].IsZero() && (dl.DeliverAt.Before(want) || dl.DeliverAt.After(want.Add(time.Second))):
				// The engine takes the later of the echoed time and its own clock at the put, which
				// can be a few microseconds later than the server's for a message due at once.
				t.Errorf("message %s due at %v, want %v as its put answered", dl.ID, dl.DeliverAt, want)
			case !asked[dl.ID].IsZero() && !dueAtLaterOf(dl.DeliverAt, want, batchStart, batchDone):
				t.Errorf("message %s due at %v, want the later of %v and its put", dl.ID, dl.DeliverAt, want)
			}
			got[dl.ID]++
			receipts = append(receipts, dl.Receipt)
		}
		if len(receipts) > 0 {
			if err := c.Ack(ctx, receipts...); err != nil {
				t.Fatal(err)
			}
		}
	}
	var lost []string
	for id := range due {
		if got[id] == 0 {
			lost = append(lost, id)
		}
	}
	slices.Sort(lost)
	if len(lost) > 0 {
		t.Fatalf("%d of %d messages lost across kill -9: %v", len(lost), len(due), lost)
	}
	// The cancel was durable too: nothing more arrives after its due time.
	wait := max(time.Until(cancelled.DeliverAt)+500*time.Millisecond, time.Millisecond)
	if ds, err := c.Receive(ctx, "k9", client.ReceiveOptions{Wait: wait}); err != nil || len(ds) != 0 {
		t.Fatalf("after all were delivered: %d more, %v", len(ds), err)
	}
}

// TestKill9MidCoalescedPutsLosesNothing kills tockd with SIGKILL while 32
// producers put through one Client, whose concurrent Puts share batch
// requests (coalescing, the default), after a random number of them were
// answered; after a restart every put answered is there, due when its
// answer said. A batch the kill cut short must be refused whole or stored
// whole, and none of its puts may be answered before it is durable.
func TestKill9MidCoalescedPutsLosesNothing(t *testing.T) {
	dir := t.TempDir()
	d := startTockd(t, dir, nil)
	c := d.client(t, client.WithRetries(0, 0))
	ctx := ctxFor(t, 2*time.Minute)
	seed := time.Now().UnixNano()
	killAfter := 200 + int(seed%2000)
	t.Logf("seed %d: kill after %d answered puts", seed, killAfter)

	var mu sync.Mutex
	due := map[string]time.Time{}
	var killed sync.Once
	var dead atomic.Bool
	kill := func() {
		killed.Do(func() {
			dead.Store(true)
			if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
				t.Error(err)
			}
		})
	}
	var wg sync.WaitGroup
	for w := range 32 {
		wg.Go(func() {
			for i := 0; ; i++ {
				res, err := c.Put(ctx, "k9c", client.Message{Delay: time.Hour, Payload: json.RawMessage(fmt.Sprint(w*1_000_000 + i))})
				if err != nil {
					// After the kill, a put fails with its connection; an answer, or any
					// error before the kill, is a failure of its own.
					var e *client.Error
					if errors.As(err, &e) || !dead.Load() {
						t.Errorf("producer %d: %v", w, err)
					}
					kill()
					return
				}
				mu.Lock()
				due[res.ID] = res.DeliverAt
				n := len(due)
				mu.Unlock()
				if n >= killAfter {
					kill()
				}
			}
		})
	}
	wg.Wait()
	<-d.done
	if len(due) < killAfter {
		t.Fatalf("%d puts answered before the kill; want at least %d", len(due), killAfter)
	}

	d = startTockd(t, dir, nil)
	c = d.client(t)
	found := map[string]time.Time{}
	for cursor := ""; ; {
		page, next, err := c.Messages(ctx, "k9c", queue.Scheduled, cursor, api.MaxPage)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range page {
			found[m.ID] = m.DeliverAt
		}
		if next == "" {
			break
		}
		cursor = next
	}
	lost := 0
	for id, at := range due {
		switch got, ok := found[id]; {
		case !ok:
			lost++
		case !got.Equal(at):
			t.Errorf("message %s due at %v after the restart; its put answered %v", id, got, at)
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d answered puts lost across kill -9", lost, len(due))
	}
	t.Logf("%d answered puts kept, %d stored of puts cut short", len(due), len(found)-len(due))
}

func sum(ns []int) int {
	total := 0
	for _, n := range ns {
		total += n
	}
	return total
}

// dueAtLaterOf reports whether due is the later of asked and the time of a
// put that ran from start to done.
func dueAtLaterOf(due, asked, start, done time.Time) bool {
	switch {
	case !asked.Before(done):
		return due.Equal(asked)
	case asked.Before(start):
		return !due.Before(start) && !due.After(done)
	default:
		return !due.Before(asked) && !due.After(done)
	}
}

// waitInFlight polls /metrics until it shows line, so a test can act while
// a request is known to be in flight.
func waitInFlight(t *testing.T, d *daemon, line string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute) // a bound on a bug, not a time the tests rely on
	for time.Now().Before(deadline) {
		resp, err := http.Get(d.url + "/metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if strings.Contains(string(body), line) {
			return
		}
		runtime.Gosched()
	}
	t.Fatalf("metrics never showed %s", line)
}

// TestShortTokenWarns is the regression test of TOCK_TOKEN=short accepted without a word, although
// the docs advise at least 16 random characters.
func TestShortTokenWarns(t *testing.T) {
	d := startTockd(t, t.TempDir(), []string{"TOCK_TOKEN=short"})
	if !strings.Contains(d.logs(), "the token is 5 characters") {
		t.Errorf("no warning about a 5-character token:\n%s", d.logs())
	}
	d = startTockd(t, t.TempDir(), []string{"TOCK_TOKEN=0123456789abcdef"})
	if strings.Contains(d.logs(), "the token is") {
		t.Errorf("a warning about a 16-character token:\n%s", d.logs())
	}
}
