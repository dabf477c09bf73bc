package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/server"
)

// startServer serves a real queue in a fresh directory, in process.
func startServer(t *testing.T, token string) string {
	t.Helper()
	q, err := delayq.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(server.New(q, server.WithToken(token)))
	t.Cleanup(func() {
		ts.Close()
		q.Close()
	})
	return ts.URL
}

func runCmd(t *testing.T, name string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = queueCommands()[name](context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestCLI(t *testing.T) {
	url := startServer(t, "")

	code, out, errs := runCmd(t, "put", "jobs", `{"n":1}`, "--server", url, "--id", "job-1")
	if code != exitOK || !strings.HasPrefix(out, "job-1\t") {
		t.Fatalf("put: %d %q %q", code, out, errs)
	}
	// A payload that is not JSON is sent as a string; flags may come first.
	if code, _, errs = runCmd(t, "put", "--server", url, "jobs", "hello world"); code != exitOK {
		t.Fatalf("put string: %d %q", code, errs)
	}
	if code, _, errs = runCmd(t, "put", "--server", url, "--delay", "1h", "--id", "later", "jobs"); code != exitOK {
		t.Fatalf("put delayed: %d %q", code, errs)
	}

	code, out, errs = runCmd(t, "receive", "--server", url, "--no-ack", "--wait", "2s", "--visibility", "1s", "jobs")
	if code != exitOK || strings.Count(out, "\n") != 2 {
		t.Fatalf("receive --no-ack: %d %q %q", code, out, errs)
	}
	var d struct {
		ID      string          `json:"id"`
		Payload json.RawMessage `json:"payload"`
		Attempt int             `json:"attempt"`
	}
	if err := json.Unmarshal([]byte(strings.SplitN(out, "\n", 2)[0]), &d); err != nil || d.ID != "job-1" || string(d.Payload) != `{"n":1}` {
		t.Fatalf("received line %q: %+v %v", out, d, err)
	}
	// Not acked: after the 1s lease and the queue's backoff they come back, and are acked now.
	var all string
	for strings.Count(all, "\n") < 2 {
		code, out, errs = runCmd(t, "receive", "--server", url, "--wait", "10s", "--max", "5", "jobs")
		if code != exitOK || out == "" || strings.Count(out, `"attempt":2`) != strings.Count(out, "\n") {
			t.Fatalf("receive after lease expiry: %d %q %q", code, out, errs)
		}
		all += out
	}
	out = all
	if !strings.Contains(out, `"hello world"`) {
		t.Errorf("string payload not delivered as a JSON string: %q", out)
	}

	if code, out, _ = runCmd(t, "cancel", "--server", url, "later"); code != exitOK || out != "cancelled later\n" {
		t.Fatalf("cancel: %d %q", code, out)
	}
	if code, _, errs = runCmd(t, "cancel", "--server", url, "later"); code != exitNotFound || !strings.Contains(errs, "no pending message") {
		t.Fatalf("second cancel: %d %q", code, errs)
	}
	code, out, _ = runCmd(t, "stats", "--server", url)
	if code != exitOK || !strings.Contains(out, "puts        3") || !strings.Contains(out, "cancels     1") {
		t.Fatalf("stats: %d %q", code, out)
	}
}

func TestCLIErrors(t *testing.T) {
	url := startServer(t, "tok")
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"put", []string{"--server", url}, exitUsage, "usage"},
		{"put", []string{"--server", url, "--token", "tok", "--delay", "-1s", "jobs"}, exitUsage, "negative"},
		{"put", []string{"--server", url, "--token", "tok", "--delay", "1s", "--at", "2030-01-01T00:00:00Z", "jobs"}, exitUsage, "not both"},
		{"put", []string{"--server", url, "--token", "tok", "--at", "tomorrow", "jobs"}, exitUsage, "RFC 3339"},
		{"put", []string{"--server", url, "jobs"}, exitFailed, "token"},
		{"put", []string{"--server", url, "--token", "tok", "bad topic"}, exitFailed, "invalid topic"},
		{"receive", []string{"--server", url, "--token", "tok", "--max", "0", "jobs"}, exitUsage, "--max"},
		{"receive", []string{"--server", url, "--token", "tok", "--wait", "1h", "jobs"}, exitFailed, "limit"},
		{"stats", []string{"--server", url, "--token", "tok", "extra"}, exitUsage, "usage"},
		{"cancel", []string{"--server", url, "--bogus", "x"}, exitUsage, "bogus"},
		// A wrong server URL is a failure, not "no such message" (exit 3).
		{"cancel", []string{"--server", url + "/tock", "--token", "tok", "x"}, exitFailed, "no such route"},
	} {
		code, _, errs := runCmd(t, tc.name, tc.args...)
		if code != tc.code || !strings.Contains(errs, tc.msg) {
			t.Errorf("tock %s %v: exit %d %q, want %d mentioning %q", tc.name, tc.args, code, errs, tc.code, tc.msg)
		}
	}

	// A server that is not there gets a hint, not a stack of wrapped errors.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	code, _, errs := runCmd(t, "stats", "--server", addr)
	if code != exitFailed || !strings.Contains(errs, "cannot reach tockd") {
		t.Errorf("stats of a closed port: %d %q", code, errs)
	}
}

// TestHelpExitsZero is the regression test of "tock put -h" and the like exiting 2, as for a
// mistake, while "tock --help" and "tockd -h" exit 0: help that was asked for is printed and the
// command succeeds, so scripts and shells do not report a failure.
func TestHelpExitsZero(t *testing.T) {
	for name := range commands() {
		for _, arg := range []string{"-h", "--help"} {
			var out, errb bytes.Buffer
			code := commands()[name](context.Background(), []string{arg}, &out, &errb)
			if code != exitOK || !strings.Contains(errb.String(), "usage: tock "+name) {
				t.Errorf("tock %s %s: exit %d %q, want 0 and the usage", name, arg, code, errb.String())
			}
		}
	}
}
