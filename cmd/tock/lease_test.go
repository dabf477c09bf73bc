package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tockwheel/tock/client"
)

func runLease(t *testing.T, name string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = leaseCommands()[name](context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// receiveNoAck leases one message of topic and returns its receipt.
func receiveNoAck(t *testing.T, url, topic string) string {
	t.Helper()
	code, out, errs := runCmd(t, "receive", "--server", url, "--no-ack", "--max", "1", "--wait", "2s", topic)
	var d struct {
		Receipt string `json:"receipt"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &d) != nil || d.Receipt == "" {
		t.Fatalf("receive --no-ack: %d %q %q", code, out, errs)
	}
	return d.Receipt
}

// TestCLIAckNackExtend ends and extends the leases tock receive --no-ack printed.
func TestCLIAckNackExtend(t *testing.T) {
	url := startServer(t, "")
	c, _ := client.New(url)
	ctx := context.Background()
	res, err := c.Put(ctx, "jobs", client.Message{ID: "j1"})
	if err != nil {
		t.Fatal(err)
	}
	rc := receiveNoAck(t, url, "jobs")
	if code, out, errs := runLease(t, "extend", "--server", url, rc, "--for", "10m"); code != exitOK || !strings.Contains(out, "extended") {
		t.Fatalf("extend: %d %q %q", code, out, errs)
	}
	if m, err := c.Message(ctx, res.ID); err != nil || time.Until(m.LeaseDeadline) < 9*time.Minute {
		t.Fatalf("after extend --for 10m, the lease ends %v (%v)", m.LeaseDeadline, err)
	}
	if code, _, errs := runLease(t, "extend", "--server", url, rc); code != exitUsage || !strings.Contains(errs, "--for") {
		t.Fatalf("extend without --for: %d %q", code, errs)
	}
	if code, _, errs := runLease(t, "nack", "--server", url, rc, "--dead", "--delay", "1m"); code != exitUsage {
		t.Fatalf("nack --dead --delay: %d %q", code, errs)
	}
	if code, out, errs := runLease(t, "nack", "--server", url, rc, "--reason", "no such user", "--dead"); code != exitOK || !strings.Contains(out, "dead letters") {
		t.Fatalf("nack --dead: %d %q %q", code, out, errs)
	}
	m, err := c.Message(ctx, res.ID)
	if err != nil || m.State != "dead" || m.LastFailure != "dead-lettered" || m.Reason != "no such user" {
		t.Fatalf("after nack --dead --reason: %+v, %v", m, err)
	}
	for _, name := range []string{"nack", "extend", "ack"} {
		args := []string{"--server", url, rc}
		switch name {
		case "extend":
			args = append(args, "--for", "1m")
		case "ack":
			args[2] += "x"
		}
		code, _, errs := runLease(t, name, args...)
		if code != exitStale || !strings.Contains(errs, "stale") && !strings.Contains(errs, "no current lease") {
			t.Errorf("%s of a receipt of no current lease: %d %q; want exit %d saying why", name, code, errs, exitStale)
		}
	}
	rc = receiveNoAck(t, url, "jobs.dead")
	if code, out, errs := runLease(t, "ack", "--server", url, rc); code != exitOK || out != "acked 1\n" {
		t.Fatalf("ack: %d %q %q", code, out, errs)
	}
}

// syncBuffer is a bytes.Buffer safe for the concurrent writes of tock work.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestCLIWork runs a shell script per message: it gets the payload on stdin and the message in
// its environment; exit 0 acks, and a failure is nacked with the script's last line of stderr as
// the reason.
func TestCLIWork(t *testing.T) {
	url := startServer(t, "")
	c, _ := client.New(url)
	ctx := context.Background()
	for _, m := range []client.Message{
		{ID: "ok", Payload: json.RawMessage(`{"n":1}`)},
		{ID: "text", Payload: json.RawMessage(`"hello"`)},
		{ID: "bad", Payload: json.RawMessage(`"fail"`)},
	} {
		if _, err := c.Put(ctx, "jobs", m); err != nil {
			t.Fatal(err)
		}
	}
	script := `p=$(cat); if [ "$p" = fail ]; then echo "some noise" >&2; echo "cannot do $TOCK_ID on attempt $TOCK_ATTEMPT" >&2; exit 3; fi; echo "did $TOCK_TOPIC/$TOCK_ID: $p"`
	var out, errb syncBuffer
	wctx, stop := context.WithCancel(ctx)
	done := make(chan int, 1)
	go func() {
		done <- workCommand(wctx, []string{"--server", url, "--concurrency", "2", "jobs", "--", "sh", "-c", script}, &out, &errb)
	}()
	deadline := time.Now().Add(20 * time.Second)
	for {
		m, err := c.Message(ctx, "bad")
		if err == nil && m.Reason != "" && strings.Count(out.String(), "did ") == 2 {
			if m.Reason != "cannot do bad on attempt 1" || m.LastFailure != "nacked" {
				t.Fatalf("the failed message's last failure: %q %q; want the script's last line of stderr", m.LastFailure, m.Reason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tock work did not handle the messages in 20s: stdout %q, stderr %q", out.String(), errb.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if code := <-done; code != exitOK {
		t.Fatalf("tock work after SIGINT: exit %d, stderr %q", code, errb.String())
	}
	for _, want := range []string{`did jobs/ok: {"n":1}`, "did jobs/text: hello"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stdout %q lacks %q", out.String(), want)
		}
	}
	for _, id := range []string{"ok", "text"} {
		if _, err := c.Message(ctx, id); err == nil {
			t.Errorf("message %q is still waiting after its command exited 0", id)
		}
	}
	if code, _, errs := runLease(t, "work", "--server", url, "jobs", "--", "no-such-command-here"); code != exitUsage || !strings.Contains(errs, "no-such-command-here") {
		t.Errorf("work with a missing command: %d %q", code, errs)
	}
}

// TestCLILimit sets, lists and removes a topic's delivery limit.
func TestCLILimit(t *testing.T) {
	url := startServer(t, "")
	run := func(name string, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := limitCommands()[name](context.Background(), append([]string{"--server", url}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, out, errs := run("limit", "emails", "--rate", "50", "--concurrency", "8"); code != exitOK || !strings.Contains(out, "burst 5") {
		t.Fatalf("limit: %d %q %q; want the default burst, 5, said", code, out, errs)
	}
	if code, out, _ := run("limits"); code != exitOK || !strings.Contains(out, "emails") || !strings.Contains(out, "50") || !strings.Contains(out, "8") {
		t.Fatalf("limits: %d %q", code, out)
	}
	for _, bad := range [][]string{{"emails"}, {"emails", "--off", "--rate", "1"}, {"emails", "--rate", "-1"}, {"emails", "--burst", "3"}} {
		if code, _, errs := run("limit", bad...); code != exitUsage || errs == "" {
			t.Errorf("limit %q: %d %q; want a usage error", bad, code, errs)
		}
	}
	if code, out, errs := run("limit", "emails", "--off"); code != exitOK || !strings.Contains(out, "no limit") {
		t.Fatalf("limit --off: %d %q %q", code, out, errs)
	}
	if code, _, errs := run("limits"); code != exitOK || !strings.Contains(errs, "no topic has a limit") {
		t.Fatalf("limits after --off: %d %q", code, errs)
	}
}
