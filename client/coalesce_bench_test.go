package client

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkCoalescerNext measures what taking a batch out of the calls that wait costs the
// coalescing, per call taken: 10,000 puts of 40 bytes wait (a batch takes 1,000 of them, the
// most one holds).
func BenchmarkCoalescerNext(b *testing.B) {
	co := newCoalescer(1, nil)
	body := []byte(`{"payload":"0123456789012345678901234"}`)
	waiting := make([]*call, 10000)
	for i := range waiting {
		waiting[i] = &call{ctx: context.Background(), body: body}
	}
	q := &callQueue{inFlight: 1}
	taken := 0
	b.ResetTimer()
	for b.Loop() {
		if len(q.waiting) == 0 {
			b.StopTimer()
			for _, cl := range waiting {
				cl.taken = false
			}
			q.waiting = append(q.waiting[:0], waiting...)
			b.StartTimer()
		}
		taken += len(co.next(q, "t", co.putFits))
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(taken), "ns/call")
}

// answering is a transport that answers every request with the same put answer, at once: what a
// Put costs the client itself.
type answering struct{}

func (answering) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Body != nil {
		io.Copy(io.Discard, req.Body)
		req.Body.Close()
	}
	body := `{"id":"0123456789abcdef","deliver_at":"2030-01-01T00:00:00Z"}` + "\n"
	return &http.Response{
		StatusCode:    http.StatusCreated,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(strings.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}, nil
}

// BenchmarkPut measures what a Put costs the client, alone (no other call in flight, as most
// calls of a Client that is not busy are) through a coalescing Client, its server answering at
// once.
func BenchmarkPut(b *testing.B) {
	c, err := New("http://tockd.test", WithHTTPClient(&http.Client{Transport: answering{}}))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	m := Message{Payload: []byte(`"hello"`), Delay: time.Minute}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Put(ctx, "t", m); err != nil {
			b.Fatal(err)
		}
	}
}
