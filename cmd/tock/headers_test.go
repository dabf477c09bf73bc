package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestCLIHeaders puts a message with --header flags, sees them in tock message and in what tock
// receive prints, and checks that bad headers are refused before any request.
func TestCLIHeaders(t *testing.T) {
	url := startServer(t, "")
	code, _, errs := runCmd(t, "put", "--server", url, "--id", "h1", "--header", "traceparent=00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		"--header", "note=a=b, \"quoted\"", "--header", "empty=", "jobs", "x")
	if code != exitOK {
		t.Fatalf("put with headers: %d %q", code, errs)
	}
	code, out, errs := runAdmin(t, "message", "--server", url, "h1")
	for _, want := range []string{`header empty ""`, `header note "a=b, \"quoted\""`, `header traceparent "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"`} {
		if code != exitOK || !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
			t.Fatalf("message: %d %q %q; want a line %q", code, out, errs, want)
		}
	}
	code, out, errs = runCmd(t, "receive", "--server", url, "--wait", "5s", "jobs")
	var d struct {
		ID      string            `json:"id"`
		Headers map[string]string `json:"headers"`
	}
	if err := json.Unmarshal([]byte(out), &d); code != exitOK || err != nil || d.ID != "h1" || d.Headers["note"] != `a=b, "quoted"` || len(d.Headers) != 3 {
		t.Fatalf("receive: %d %q %q: %+v %v", code, out, errs, d, err)
	}
	for _, bad := range [][]string{
		{"--header", "novalue"},
		{"--header", "a b=c"},
		{"--header", "k=1", "--header", "k=2"},
		{"--header", "k=line\nbreak"},
	} {
		args := append([]string{"put", "--server", url}, bad...)
		if code, _, errs := runCmd(t, args[0], append(args[1:], "jobs")...); code != exitUsage || !strings.Contains(errs, "header") {
			t.Errorf("put %q: %d %q; want a usage error about the header", bad, code, errs)
		}
	}
}
