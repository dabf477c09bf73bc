package server

import (
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/tockwheel/tock/delayq"
)

// BenchmarkServeHTTP measures one request through the Server's handler,
// without a network, so that the cost of what runs before the route (path,
// host, origin, token and content-type checks, metrics) shows beside the
// route's own work. The puts go to a queue without fsync: with it, a put
// costs a millisecond of disk time that hides everything else.
//
//	go test ./server -run '^$' -bench ServeHTTP -count 5
func BenchmarkServeHTTP(b *testing.B) {
	q, err := delayq.Open(b.TempDir(), delayq.WithNoSync())
	if err != nil {
		b.Fatal(err)
	}
	defer q.Close()
	s := New(q)
	for _, tc := range []struct{ name, method, path, body string }{
		{"healthz", "GET", "/healthz", ""},
		{"put", "POST", "/v1/topics/bench/messages", `{"payload":{"user":12345,"event":"reminder"},"delay":"1h"}`},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				req := httptest.NewRequest(tc.method, tc.path, strings.NewReader(tc.body))
				if tc.body != "" {
					req.Header.Set("Content-Type", "application/json")
				}
				rec := httptest.NewRecorder()
				s.ServeHTTP(rec, req)
				if rec.Code >= 300 {
					b.Fatalf("%s %s: %d %s", tc.method, tc.path, rec.Code, rec.Body)
				}
			}
		})
	}
}
