package server

import (
	"strings"
	"testing"

	"github.com/tockwheel/tock/delayq"
)

// TestAnswersAreNotHTMLEscaped is the regression test of the 401 body that read
// "Bearer \u003ctoken\u003e": JSON's HTML escaping has no place in an API's answers.
func TestAnswersAreNotHTMLEscaped(t *testing.T) {
	q, err := delayq.Open(t.TempDir(), delayq.WithNoSync())
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	r := serve(t, New(q, WithToken("0123456789abcdef")), "GET", "/v1/stats", "")
	if r.status != 401 || !strings.Contains(string(r.body), "Bearer <token>") {
		t.Fatalf("401 body %q; want it to read Bearer <token>", r.body)
	}
}
