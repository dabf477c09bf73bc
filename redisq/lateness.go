package redisq

import (
	"slices"
	"sync"
	"time"

	"github.com/tockwheel/tock/queue"
)

// The scripts measure lateness where it is decided: each message a script makes due (a Put due
// within a second, a promotion from the wheel, a failed delivery due again, a requeue) counts in
// its shard's lateness hash {T}:lat, with how long after its due time the script ran (0 when the
// message is made ready ahead of it): n (count), sum and max (ms), and b1... the count of each
// bucket of latenessBounds. The engine adds the shards' hashes up in Stats.

// latenessBounds are the upper bounds, in milliseconds, of the lateness buckets b1, b2, ... of the
// shards' lateness hashes; a last bucket counts the lateness above them. They are LATB in
// lua/prelude.lua: change both or neither.
var latenessBounds = []int64{0, 1, 2, 5, 10, 25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000}

// recentLateness is how far back the percentiles of Stats.Lateness look.
const recentLateness = time.Minute

// latenessTotals are the lateness hashes of the shards added up.
type latenessTotals struct {
	count, sum, max int64
	buckets         []uint64 // len(latenessBounds)+1, not cumulative
}

func (t *latenessTotals) add(count, sum, maxMs int64, buckets []int64) {
	t.count += count
	t.sum += sum
	t.max = max(t.max, maxMs)
	for i, b := range buckets {
		t.buckets[i] += uint64(b)
	}
}

// latenessWindow keeps the bucket counts Stats saw in the last recentLateness, so that the
// percentiles it reports are those of the messages that fell due since the oldest of them.
type latenessWindow struct {
	mu    sync.Mutex
	snaps []latenessSnapshot
}

type latenessSnapshot struct {
	at      time.Time
	buckets []uint64
}

// maxSnapshots bounds the snapshots kept, however often Stats is called.
const maxSnapshots = 256

// summary returns the Lateness of totals, read at now: Count and Sum are the totals', the
// percentiles and Max those of the messages that fell due since the oldest snapshot within
// recentLateness (since the deployment was created, on the first call).
func (w *latenessWindow) summary(now time.Time, totals latenessTotals) queue.Lateness {
	w.mu.Lock()
	base := make([]uint64, len(totals.buckets))
	// Keep the newest snapshot older than the window as the base, so that the window is covered.
	i := 0
	for i+1 < len(w.snaps) && now.Sub(w.snaps[i+1].at) >= recentLateness {
		i++
	}
	w.snaps = w.snaps[i:]
	if len(w.snaps) >= maxSnapshots {
		w.snaps = slices.Delete(w.snaps, 1, 2)
	}
	if len(w.snaps) > 0 && len(w.snaps[0].buckets) == len(base) {
		copy(base, w.snaps[0].buckets)
	}
	w.snaps = append(w.snaps, latenessSnapshot{at: now, buckets: slices.Clone(totals.buckets)})
	w.mu.Unlock()

	l := queue.Lateness{Count: uint64(totals.count), Sum: time.Duration(totals.sum) * time.Millisecond}
	delta := make([]uint64, len(base))
	var n uint64
	for k := range delta {
		if totals.buckets[k] > base[k] { // a deployment made anew (flushed) counts from zero
			delta[k] = totals.buckets[k] - base[k]
		}
		n += delta[k]
	}
	if n == 0 {
		return l
	}
	bound := func(k int) time.Duration {
		if k < len(latenessBounds) {
			return time.Duration(latenessBounds[k]) * time.Millisecond
		}
		return time.Duration(totals.max) * time.Millisecond
	}
	at := func(p float64) time.Duration {
		rank := uint64(p*float64(n) + 0.5)
		rank = max(rank, 1)
		var c uint64
		for k, d := range delta {
			c += d
			if c >= rank {
				return bound(k)
			}
		}
		return bound(len(delta) - 1)
	}
	l.P50, l.P99 = at(0.5), at(0.99)
	for k := len(delta) - 1; k >= 0; k-- {
		if delta[k] > 0 {
			l.Max = bound(k)
			break
		}
	}
	return l
}
