package client

import (
	"context"
	"testing"
)

// BenchmarkCoalescerNext measures what taking a batch out of the calls that wait costs the
// coalescing, per call taken: 10,000 puts of 40 bytes wait (a batch takes 1,000 of them, the
// most one holds).
func BenchmarkCoalescerNext(b *testing.B) {
	co := newCoalescer(1)
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
