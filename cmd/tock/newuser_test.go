package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
)

// These tests try the CLI as a new user did in issue 22, one mistake at a time.

func TestBrokenJSONIsNotStoredAsAString(t *testing.T) {
	if _, err := payloadArg([]byte(`{"x":1`), false); err == nil || !strings.Contains(err.Error(), "--string") {
		t.Errorf(`payload {"x":1: %v; want refused, pointing at --string`, err)
	}
	for _, c := range []struct {
		in       string
		asString bool
		want     string
	}{
		{`{"x":1}`, false, `{"x":1}`},
		{`hello`, false, `"hello"`},
		{`{"x":1`, true, `"{\"x\":1"`},
		{`{"x":1}`, true, `"{\"x\":1}"`},
		{`12abc`, false, `"12abc"`},
	} {
		got, err := payloadArg([]byte(c.in), c.asString)
		if err != nil || string(got) != c.want {
			t.Errorf("payloadArg(%q, %v) = %s, %v; want %s", c.in, c.asString, got, err, c.want)
		}
	}
}

func TestDurationWithoutUnit(t *testing.T) {
	code, _, errs := runCmd(t, "put", "--delay", "30", "orders", "x")
	if code != exitUsage || !strings.Contains(errs, `"30" has no unit`) || !strings.Contains(errs, "30s") {
		t.Fatalf("--delay 30: exit %d, %q; want 2 saying what a duration looks like", code, errs)
	}
	if strings.Contains(errs, "-server") {
		t.Errorf("--delay 30 printed the whole usage:\n%s", errs)
	}
	if code, _, errs := runCmd(t, "put", "-h"); code != exitOK || !strings.Contains(errs, "-server") {
		t.Errorf("put -h: exit %d, %q; want the flags", code, errs)
	}
}

func TestDevNullIsNoTerminal(t *testing.T) {
	f, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) {
		t.Fatal("/dev/null taken for a terminal: purge would ask nobody")
	}
}

func TestPurgeOfNothingDoesNotAsk(t *testing.T) {
	url := startAdminServer(t)
	mustRun(t, runCmd, "put", "--server", url, "--delay", "1h", "jobs")
	var out, errb bytes.Buffer
	code := purge(context.Background(), []string{"--server", url, "jobs", "--state", "dead"}, strings.NewReader(""), true, &out, &errb)
	if code != exitOK || !strings.Contains(errb.String(), "nothing to remove") || strings.Contains(errb.String(), "Remove") {
		t.Fatalf("purge of 0 dead letters: exit %d, %q; want nothing asked", code, errb.String())
	}
}

func TestPauseOfANeverSeenTopic(t *testing.T) {
	url := startAdminServer(t)
	if code, _, errs := runAdmin(t, "pause", "--server", url, "ghost"); code != exitNotFound || !strings.Contains(errs, "--new") {
		t.Fatalf("pause ghost: exit %d, %q; want 3 pointing at --new", code, errs)
	}
	if out := mustRun(t, runAdmin, "topics", "--server", url); strings.Contains(out, "ghost") {
		t.Fatalf("the refused pause made a topic:\n%s", out)
	}
	mustRun(t, runAdmin, "pause", "--server", url, "--new", "ghost")
}

func TestRequeueNamesWhatItDidNotFind(t *testing.T) {
	url := startAdminServer(t)
	killMessage(t, url, "jobs", "dead-1")
	mustRun(t, runCmd, "put", "--server", url, "--delay", "1h", "--id", "alive", "jobs")
	code, out, errs := runAdmin(t, "requeue", "--server", url, "jobs", "dead-1", "alive", "nowhere")
	if code != exitNotFound || !strings.Contains(out, "requeued 1") ||
		!strings.Contains(errs, "alive (scheduled, not a dead letter)") || !strings.Contains(errs, "nowhere (no waiting message)") {
		t.Fatalf("requeue of one dead letter and two others: exit %d, %q %q", code, out, errs)
	}
}

func TestReceiveOfAPausedTopicSaysSo(t *testing.T) {
	url := startAdminServer(t)
	mustRun(t, runCmd, "put", "--server", url, "jobs", "x")
	mustRun(t, runAdmin, "pause", "--server", url, "jobs")
	code, _, errs := runCmd(t, "receive", "--server", url, "--wait", "0s", "jobs")
	if code != exitOK || !strings.Contains(errs, `"jobs" is paused: its 1 due message(s) wait until tock resume jobs`) {
		t.Fatalf("receive of a paused topic: exit %d, %q", code, errs)
	}
}
