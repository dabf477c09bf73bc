package server

import (
	"math"
	"sync"
	"time"

	"github.com/tockwheel/tock/api"
)

// History and forecast sizes: the status page shows the last ten minutes
// and the next hour, second by second.
const (
	historySeconds  = 600
	forecastSeconds = 3600
	latencyBuckets  = 96
)

// Lateness buckets are logarithmic: bucket i holds lateness below
// latencyBase·2^((i+1)/3), so 96 buckets span 100µs to about five days
// with a relative error of at most 26%, in 384 bytes a second. A message
// delivered later than that counts as five days late.
const latencyBase = 100 * time.Microsecond

func latencyBucket(d time.Duration) int {
	if d < latencyBase {
		return 0
	}
	i := int(3 * math.Log2(float64(d)/float64(latencyBase)))
	return min(i, latencyBuckets-1)
}

// latencyBound is the upper bound of bucket i.
func latencyBound(i int) time.Duration {
	return time.Duration(float64(latencyBase) * math.Exp2(float64(i+1)/3))
}

// A second holds what happened in one wall-clock second.
type second struct {
	unix                                int64
	puts, deliveries, acks, nacks, cans uint32
	late                                [latencyBuckets]uint32
}

// activity records puts, deliveries and lateness per second for the status
// page. It is goroutine-free: old seconds are recycled as new ones are
// written, so an idle server costs nothing. It is safe for concurrent use.
// The forecast is not here: it is the engine's (queue.Engine.DueCounts),
// which counts every scheduled message, not only those put through this
// server since it started.
type activity struct {
	mu      sync.Mutex
	seconds [historySeconds]second // indexed by unix second mod historySeconds
}

// secondLocked returns the record of unix second s, recycling it if it held
// an older second. a.mu must be held.
func (a *activity) secondLocked(s int64) *second {
	r := &a.seconds[s%historySeconds]
	if r.unix != s {
		*r = second{unix: s}
	}
	return r
}

// put counts n messages put at now.
func (a *activity) put(now time.Time, n int) {
	a.mu.Lock()
	a.secondLocked(now.Unix()).puts += uint32(n)
	a.mu.Unlock()
}

func (a *activity) delivered(now time.Time, lateness []time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	r := a.secondLocked(now.Unix())
	r.deliveries += uint32(len(lateness))
	for _, d := range lateness {
		if d >= 0 {
			r.late[latencyBucket(d)]++
		}
	}
}

func (a *activity) acked(now time.Time, n int) {
	a.mu.Lock()
	a.secondLocked(now.Unix()).acks += uint32(n)
	a.mu.Unlock()
}

func (a *activity) nacked(now time.Time) {
	a.mu.Lock()
	a.secondLocked(now.Unix()).nacks++
	a.mu.Unlock()
}

func (a *activity) cancelled(now time.Time) {
	a.mu.Lock()
	a.secondLocked(now.Unix()).cans++
	a.mu.Unlock()
}

// history returns the n seconds before now (the current second is still
// filling up) and the lateness over the last window of them and the
// current second.
func (a *activity) history(now time.Time, n, window int) (api.History, api.Lateness) {
	n = min(n, historySeconds-1)
	end := now.Unix() // exclusive
	h := api.History{
		Start:      end - int64(n),
		Puts:       make([]uint32, n),
		Deliveries: make([]uint32, n),
		Acks:       make([]uint32, n),
		LateP50:    make([]float64, n),
		LateP99:    make([]float64, n),
	}
	var total [latencyBuckets]uint32
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := range n {
		s := h.Start + int64(i)
		r := &a.seconds[s%historySeconds]
		h.LateP50[i], h.LateP99[i] = -1, -1
		if r.unix != s {
			continue
		}
		h.Puts[i], h.Deliveries[i], h.Acks[i] = r.puts, r.deliveries, r.acks
		h.LateP50[i] = percentile(&r.late, 0.50)
		h.LateP99[i] = percentile(&r.late, 0.99)
		if i >= n-window {
			for b, c := range r.late {
				total[b] += c
			}
		}
	}
	// The summary includes the current second: a delivery counts at once.
	if r := &a.seconds[end%historySeconds]; r.unix == end {
		for b, c := range r.late {
			total[b] += c
		}
	}
	var l api.Lateness
	for b, c := range total {
		l.Count += uint64(c)
		if c > 0 {
			l.Max = latencyBound(b).Seconds()
		}
	}
	if l.Count > 0 {
		l.P50, l.P90, l.P99 = percentile(&total, 0.5), percentile(&total, 0.9), percentile(&total, 0.99)
	}
	return h, l
}

// percentile returns the upper bound, in seconds, of the bucket holding the
// q-quantile, or -1 for empty buckets. An upper bound never understates.
func percentile(b *[latencyBuckets]uint32, q float64) float64 {
	var n uint64
	for _, c := range b {
		n += uint64(c)
	}
	if n == 0 {
		return -1
	}
	rank := uint64(math.Ceil(q * float64(n)))
	var seen uint64
	for i, c := range b {
		seen += uint64(c)
		if seen >= max(rank, 1) {
			return latencyBound(i).Seconds()
		}
	}
	return latencyBound(latencyBuckets - 1).Seconds()
}
