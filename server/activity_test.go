package server

import (
	"testing"
	"time"
)

func TestLatencyBucketsNeverUnderstate(t *testing.T) {
	for _, d := range []time.Duration{0, 1, latencyBase - 1, latencyBase, time.Millisecond, 7 * time.Millisecond,
		time.Second, time.Minute, 3 * time.Minute, time.Hour, 24 * time.Hour} {
		b := latencyBucket(d)
		if latencyBound(b) < d {
			t.Errorf("lateness %v: bucket %d bound %v is below it", d, b, latencyBound(b))
		}
		if b > 0 && latencyBound(b-1) > d {
			t.Errorf("lateness %v: bucket %d, but bucket %d (bound %v) holds it", d, b, b-1, latencyBound(b-1))
		}
	}
	// A consumer away for an hour is an hour late, not four minutes as
	// when the buckets ended there.
	if b := latencyBound(latencyBucket(time.Hour)); b < time.Hour || b > 2*time.Hour {
		t.Errorf("an hour late: bucket bound %v", b)
	}
	if b := latencyBucket(7 * 24 * time.Hour); b != latencyBuckets-1 {
		t.Errorf("a week late: bucket %d, want the last", b)
	}
}

func TestActivityHistory(t *testing.T) {
	var a activity
	t0 := time.Unix(1_000_000, 0)
	// 99 deliveries 1ms late and one 1s late in second t0; puts in t0+1.
	late := make([]time.Duration, 100)
	for i := range late {
		late[i] = time.Millisecond
	}
	late[99] = time.Second
	a.delivered(t0, late)
	a.put(t0.Add(time.Second), 3)
	a.acked(t0.Add(time.Second), 5)

	h, l := a.history(t0.Add(2*time.Second), 3, 60)
	if h.Start != t0.Unix()-1 {
		t.Fatalf("Start = %d, want %d", h.Start, t0.Unix()-1)
	}
	if h.Deliveries[1] != 100 || h.Puts[2] != 3 || h.Acks[2] != 5 || h.Puts[0] != 0 {
		t.Fatalf("history = %+v", h)
	}
	if h.LateP50[0] != -1 || h.LateP50[2] != -1 {
		t.Errorf("seconds without deliveries have p50 %v, %v; want -1", h.LateP50[0], h.LateP50[2])
	}
	if p := h.LateP50[1]; p < 0.001 || p > 0.0013 {
		t.Errorf("p50 = %v, want about 1ms", p)
	}
	if l.Count != 100 || l.P99 < 0.001 || l.P99 > 0.0013 || l.Max < 1 || l.Max > 1.3 {
		t.Errorf("lateness = %+v, want 100 with p99 ~1ms and max ~1s", l)
	}

	// Ten minutes later the old seconds are gone, not mistaken for new ones.
	later := t0.Add(historySeconds * time.Second)
	h, l = a.history(later.Add(2*time.Second), 3, 60)
	if h.Deliveries[1] != 0 || h.Puts[2] != 0 || l.Count != 0 {
		t.Fatalf("stale seconds reported: %+v %+v", h, l)
	}
}
