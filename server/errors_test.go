package server

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tockwheel/tock/api"
)

// TestAckOfManyForgedReceiptsIsBounded is the regression test of an ack of
// 100,000 forged receipts (3.5 MB) answered with a 6.8 MB error that listed
// every one: the answer says how many failed, shows the first ten and
// counts the rest, and lists the index of each, so that it is smaller than
// the request.
func TestAckOfManyForgedReceiptsIsBounded(t *testing.T) {
	ts, _ := newTestServer(t)
	const n = 100_000
	var b strings.Builder
	b.WriteString(`{"receipts":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"%032x"`, i+1)
	}
	b.WriteString(`]}`)
	r := call(t, ts, "POST", "/v1/ack", b.String())
	if r.status != 400 {
		t.Fatalf("ack of %d forged receipts: %d %.200s", n, r.status, r.body)
	}
	msg := r.errorMsg(t)
	if len(r.body) >= b.Len() {
		t.Errorf("answer of %d bytes to a request of %d", len(r.body), b.Len())
	}
	if len(msg) > maxErrorLen+64 {
		t.Errorf("message of %d bytes", len(msg))
	}
	for _, want := range []string{"100,000 of 100,000 receipts failed", "receipts[9]", "and 99,990 more"} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
	if strings.Contains(msg, "receipts[10]") {
		t.Errorf("error lists the 11th receipt: %q", msg)
	}
	var body api.AckErrorBody
	r.json(t, &body)
	if body.Code != api.CodeUnknownReceipt || body.Acked != 0 || len(body.Failed) != n || body.Failed[n-1] != n-1 {
		t.Errorf("answer %s, acked %d, %d failed; want unknown_receipt, 0 acked, every index failed", body.Code, body.Acked, len(body.Failed))
	}
}

func TestBoundedMessage(t *testing.T) {
	items := make([]error, 25)
	for i := range items {
		items[i] = fmt.Errorf("item %d failed", i)
	}
	long := strings.Repeat("é", 3000) // 6000 bytes, two per character
	for _, tc := range []struct {
		name string
		err  error
		want []string // fragments, in order
		not  string
	}{
		{"short", errors.New("short"), []string{"short"}, "more"},
		{"joined", fmt.Errorf("ack: %w", errors.Join(items...)), []string{"item 0 failed; item 1 failed", "item 9 failed; and 15 more"}, "item 10"},
		{"joined and wrapped", fmt.Errorf("engine: %w", errors.Join(items[:12]...)), []string{"item 9 failed; and 2 more"}, "item 10"},
		{"many lines", errors.New(strings.Repeat("line\n", 30) + "last"), []string{"line; line", "; and 21 more"}, "last"},
		{"long", errors.New(long), []string{strings.Repeat("é", 2048) + "... (1,904 more bytes)"}, ""},
		{"long item", errors.Join(errors.New(strings.Repeat("x", 1000)), errors.New("second")), []string{strings.Repeat("x", 256) + "... (744 more bytes); second"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := boundedMessage(tc.err)
			rest := got
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("boundedMessage = %.300q, want it to hold %.100q", got, w)
				}
				rest = rest[i+len(w):]
			}
			if tc.not != "" && strings.Contains(got, tc.not) {
				t.Errorf("boundedMessage = %.300q, holds %q", got, tc.not)
			}
			if len(got) > maxErrorLen+64 {
				t.Errorf("boundedMessage has %d bytes", len(got))
			}
		})
	}
}

// TestEveryAnswerIsJSON checks the answers that bypassed the handlers:
// paths with empty, "." or ".." segments got a bare redirect, and a topic
// or id that is a path segment was accepted although no client can name it
// in a URL.
func TestEveryAnswerIsJSON(t *testing.T) {
	ts, _ := newTestServer(t)
	for _, tc := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", "/v1/topics//messages", `{}`, 400, "bad_request"},
		{"POST", "/v1/topics/./messages", `{}`, 400, "bad_request"},
		{"POST", "/v1/topics/../messages", `{}`, 400, "bad_request"},
		{"POST", "/v1/topics/%2E%2E/messages", `{}`, 400, "bad_request"},
		{"POST", "/v1/topics/%2E/messages", `{}`, 400, "bad_request"},
		{"GET", "//v1/stats", ``, 400, "bad_request"},
		{"GET", "/v1/./stats", ``, 400, "bad_request"},
		{"DELETE", "/v1/messages/..", ``, 400, "bad_request"},
		{"POST", "/v1/topics/jobs/messages", `{"id":".."}`, 400, "bad_request"},
		{"POST", "/v1/topics/jobs/batch", `{"messages":[{"id":"."}]}`, 400, "bad_request"},
		{"GET", "/v1/stats/", ``, 404, "no_route"},
		{"GET", "/nothing", ``, 404, "no_route"},
		{"PUT", "/v1/ack", `{}`, 405, "method_not_allowed"},
		{"DELETE", "/v1/messages/nobody", ``, 404, "not_found"},
	} {
		r := call(t, ts, tc.method, tc.path, tc.body)
		if r.status != tc.status || r.header.Get("Content-Type") != "application/json" {
			t.Errorf("%s %s: %d %q %s, want %d JSON", tc.method, tc.path, r.status, r.header.Get("Content-Type"), r.body, tc.status)
			continue
		}
		if code := r.errorCode(t); code != tc.code {
			t.Errorf("%s %s: code %q, want %q", tc.method, tc.path, code, tc.code)
		}
		if loc := r.header.Get("Location"); loc != "" {
			t.Errorf("%s %s: Location %q", tc.method, tc.path, loc)
		}
	}
}

func TestValidNameRefusesPathSegments(t *testing.T) {
	for _, s := range []string{".", ".."} {
		if validName(s) {
			t.Errorf("validName(%q) = true", s)
		}
	}
	for _, s := range []string{"...", ".a", "a..b", "..a"} {
		if !validName(s) {
			t.Errorf("validName(%q) = false", s)
		}
	}
}

func TestThousands(t *testing.T) {
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 99990: "99,990", 1234567: "1,234,567", -1000: "-1,000"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
