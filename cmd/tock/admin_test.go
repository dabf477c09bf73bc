package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/delayq"
	"github.com/tockwheel/tock/server"
)

// startAdminServer serves a real queue on which a message dies at its first failed delivery.
func startAdminServer(t *testing.T) string {
	t.Helper()
	q, err := delayq.Open(t.TempDir(), delayq.WithNoSync(), delayq.WithMaxAttempts(1))
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(server.New(q, server.WithLogger(slog.New(slog.DiscardHandler))))
	t.Cleanup(func() {
		ts.Close()
		q.Close()
	})
	return ts.URL
}

func runAdmin(t *testing.T, name string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = adminCommands()[name](context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// mustRun runs a command and fails the test unless it exits 0.
func mustRun(t *testing.T, run func(*testing.T, string, ...string) (int, string, string), name string, args ...string) string {
	t.Helper()
	code, out, errs := run(t, name, args...)
	if code != exitOK {
		t.Fatalf("tock %s %s: exit %d, %q %q", name, strings.Join(args, " "), code, out, errs)
	}
	return out
}

// killMessage puts a message with id on topic and nacks its one delivery.
func killMessage(t *testing.T, url, topic, id string) {
	t.Helper()
	mustRun(t, runCmd, "put", "--server", url, "--id", id, topic, `{"dead":"`+id+`"}`)
	out := mustRun(t, runCmd, "receive", "--server", url, "--no-ack", "--max", "1", "--wait", "2s", topic)
	var d api.Delivery
	if err := json.Unmarshal([]byte(out), &d); err != nil || d.ID != id {
		t.Fatalf("received %q: %v", out, err)
	}
	cl, _ := (&connFlags{server: url}).client()
	if err := cl.Nack(context.Background(), d.Receipt, 0); err != nil {
		t.Fatal(err)
	}
}

func TestAdminCLI(t *testing.T) {
	url := startAdminServer(t)
	t.Setenv("COLUMNS", "80")
	mustRun(t, runCmd, "put", "--server", url, "--id", "soon", "--delay", "3m12s", "jobs", `{"to":"ada"}`)
	mustRun(t, runCmd, "put", "--server", url, "--id", "later", "--delay", "30h", "jobs", strings.Repeat("long payload ", 40))
	killMessage(t, url, "jobs", "d1")
	killMessage(t, url, "jobs", "d2")

	out := mustRun(t, runAdmin, "topics", "--server", url)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	// The dead letters are listed once, as jobs's: jobs.dead holds nothing else (issue 22).
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "TOPIC") || !strings.HasPrefix(lines[1], "jobs ") {
		t.Fatalf("topics table:\n%s", out)
	}
	if f := strings.Fields(lines[1]); f[1] != "2" || f[4] != "2" {
		t.Fatalf("topics row of jobs %q: want 2 scheduled, 2 dead", lines[1])
	}
	// Columns line up: every row starts its second column where the header does.
	col := strings.Index(lines[0], "SCHEDULED")
	for _, l := range lines[1:] {
		if l[col-1] != ' ' || l[col] == ' ' {
			t.Errorf("row %q is not aligned with the header %q", l, lines[0])
		}
	}
	for _, l := range lines {
		if strings.HasSuffix(l, " ") {
			t.Errorf("row %q ends with spaces", l)
		}
	}

	out = mustRun(t, runAdmin, "topics", "--server", url, "--json")
	var topic api.Topic
	if n := strings.Count(out, "\n"); n != 2 || json.Unmarshal([]byte(strings.Split(out, "\n")[0]), &topic) != nil || topic.Dead != 2 {
		t.Fatalf("topics --json (JSON Lines): %q", out)
	}

	out = mustRun(t, runAdmin, "peek", "--server", url, "jobs")
	lines = strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[1], "soon ") || !strings.Contains(lines[1], "in 3m1") || !strings.Contains(lines[1], `{"to":"ada"}`) ||
		!strings.Contains(lines[2], "in 1d0") {
		t.Fatalf("peek table:\n%s", out)
	}
	for _, l := range lines {
		if n := len([]rune(l)); n > 80 {
			t.Errorf("row of %d characters on an 80-column terminal: %q", n, l)
		}
	}
	if !strings.HasSuffix(lines[2], "…") {
		t.Errorf("long preview not shortened: %q", lines[2])
	}

	code, out, errs := runAdmin(t, "peek", "--server", url, "--state", "dead", "--limit", "1", "--json", "jobs")
	var m api.MessageInfo
	if code != exitOK || strings.Count(out, "\n") != 1 || json.Unmarshal([]byte(out), &m) != nil || m.ID != "d1" || m.LastFailure == "" ||
		!strings.Contains(errs, "--cursor ") {
		t.Fatalf("peek --limit 1 of dead letters: %d %q %q", code, out, errs)
	}
	out = mustRun(t, runAdmin, "peek", "--server", url, "--state", "dead", "--limit", "1", "--all", "jobs")
	if !strings.Contains(out, "d1 ") || !strings.Contains(out, "d2 ") || !strings.Contains(out, "nacked") || strings.Count(out, "LAST FAILURE") != 1 {
		t.Fatalf("peek --all of dead letters:\n%s", out)
	}
	if code, _, errs := runAdmin(t, "peek", "--server", url, "--state", "gone", "jobs"); code != exitUsage || !strings.Contains(errs, "scheduled, due, leased or dead") {
		t.Fatalf("peek --state gone: %d %q", code, errs)
	}

	out = mustRun(t, runAdmin, "message", "--server", url, "d1")
	if !strings.Contains(out, "state         dead") || !strings.Contains(out, "last failure  nacked") || !strings.Contains(out, "\"dead\": \"d1\"") {
		t.Fatalf("message d1:\n%s", out)
	}
	if code, _, errs := runAdmin(t, "message", "--server", url, "nothing"); code != exitNotFound || !strings.Contains(errs, "no waiting message") {
		t.Fatalf("message of none: %d %q", code, errs)
	}

	if out := mustRun(t, runAdmin, "deliver", "--server", url, "soon"); out != "soon is due now\n" {
		t.Fatalf("deliver: %q", out)
	}
	if code, _, errs := runAdmin(t, "deliver", "--server", url, "soon"); code != exitNotFound || !strings.Contains(errs, "no scheduled message") {
		t.Fatalf("deliver again: %d %q", code, errs)
	}

	if code, _, errs := runAdmin(t, "requeue", "--server", url, "jobs"); code != exitUsage || !strings.Contains(errs, "--all") {
		t.Fatalf("requeue without IDs or --all: %d %q", code, errs)
	}
	if out := mustRun(t, runAdmin, "requeue", "--server", url, "jobs", "d1"); out != "requeued 1 dead letter(s) onto jobs\n" {
		t.Fatalf("requeue d1: %q", out)
	}
	if out := mustRun(t, runAdmin, "requeue", "--server", url, "--all", "--json", "jobs"); out != `{"moved":1}`+"\n" {
		t.Fatalf("requeue --all --json: %q", out)
	}

	if out := mustRun(t, runAdmin, "pause", "--server", url, "jobs"); !strings.HasPrefix(out, "paused jobs") {
		t.Fatalf("pause: %q", out)
	}
	out = mustRun(t, runAdmin, "topics", "--server", url)
	if !strings.Contains(out, "paused") {
		t.Fatalf("topics after pause:\n%s", out)
	}
	if out := mustRun(t, runAdmin, "resume", "--json", "--server", url, "jobs"); out != `{"topic":"jobs","paused":false}`+"\n" {
		t.Fatalf("resume --json: %q", out)
	}
}

func TestPurgeAsksFirst(t *testing.T) {
	url := startAdminServer(t)
	for i := range 3 {
		mustRun(t, runCmd, "put", "--server", url, "--delay", "1h", "--id", fmt.Sprint("m", i), "jobs")
	}
	purgeWith := func(stdin string, terminal bool, args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := purge(context.Background(), append([]string{"--server", url}, args...), strings.NewReader(stdin), terminal, &out, &errb)
		return code, out.String(), errb.String()
	}
	if code, _, errs := purgeWith("", false, "jobs", "--state", "scheduled"); code != exitUsage || !strings.Contains(errs, "--yes") {
		t.Fatalf("purge without a terminal nor --yes: %d %q; want refused", code, errs)
	}
	if code, _, errs := purgeWith("no\n", true, "jobs", "--state", "scheduled"); code != exitFailed ||
		!strings.Contains(errs, `Remove 3 scheduled message(s) of "jobs"`) || !strings.Contains(errs, "nothing removed") {
		t.Fatalf("purge answered no: %d %q", code, errs)
	}
	if code, _, errs := purgeWith("yes\n", true, "jobs", "--state", "leased"); code != exitUsage || !strings.Contains(errs, "scheduled, due or dead") {
		t.Fatalf("purge of leased: %d %q", code, errs)
	}
	if code, out, errs := purgeWith("yes\n", true, "jobs", "--state", "scheduled"); code != exitOK || out != "removed 3 scheduled message(s) of jobs\n" {
		t.Fatalf("purge confirmed: %d %q %q", code, out, errs)
	}
	mustRun(t, runCmd, "put", "--server", url, "--delay", "1h", "jobs")
	if code, out, errs := purgeWith("", false, "--yes", "--json", "jobs", "--state", "scheduled"); code != exitOK || out != `{"removed":1}`+"\n" {
		t.Fatalf("purge --yes --json: %d %q %q", code, out, errs)
	}
}

func TestAgo(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{0, "now"},
		{400 * time.Millisecond, "now"},
		{3*time.Minute + 12*time.Second, "in 3m12s"},
		{-4 * time.Second, "4s ago"},
		{-(5*time.Hour + 7*time.Minute + 30*time.Second), "5h07m ago"},
		{3*24*time.Hour + 4*time.Hour, "in 3d04h"},
	} {
		if got := ago(now.Add(c.d), now); got != c.want {
			t.Errorf("ago(%v) = %q; want %q", c.d, got, c.want)
		}
	}
	if got := ago(time.Time{}, now); got != "-" {
		t.Errorf("ago(zero) = %q", got)
	}
}

func TestShorten(t *testing.T) {
	for _, c := range []struct {
		s    string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"a bit too long", 10, "a bit too…"},
		{"héllo wörld", 6, "héllo…"},
		{"line\nbreak", 20, "line break"},
	} {
		if got := shorten(c.s, c.n); got != c.want {
			t.Errorf("shorten(%q, %d) = %q; want %q", c.s, c.n, got, c.want)
		}
	}
}
