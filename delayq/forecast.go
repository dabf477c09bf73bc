package delayq

import (
	"context"
	"time"
)

// DueCounts returns how many pending messages fall due in each of n consecutive steps from from
// on: counts[i] is the number due in [from + i·step, from + (i+1)·step). It returns nil when n or
// step is not positive. Messages already due, leased or acked are not counted; a nacked message or
// one whose lease ran out counts again at the time it is due again.
//
// The counts come from what the queue keeps anyway, not from reading messages: one count per
// disk-wheel slot, kept up to date by Put, Cancel, rolling, loading and recovery, and one per
// millisecond timer of the in-memory wheel. So they are exact to the slot, with three
// approximations:
//   - A slot still on disk is counted in the step holding its start (or from, if later), so with a
//     step that is not a multiple of the slot a count can land up to one slot early.
//   - Messages due beyond the horizon (see WithHorizon) are not counted until the wheel comes
//     within a horizon of them: a forecast longer than the horizon misses them.
//   - A Cancel of a chosen ID that several messages in one slot share is counted once, and a
//     rolled copy written twice because of a crash is counted twice until its slot is loaded.
//
// Cost: O(n) memory for the result and, under the queue's lock, time proportional to the number
// of slots the range covers (at most the horizon's) plus the number of in-memory timer
// milliseconds (at most one per millisecond of the near window, plus one per distinct due time of
// messages waiting for a retry). It reads nothing from disk, so it is cheap enough for a status
// page polled every second. Its error is always nil: the counts are in memory.
func (q *Queue) DueCounts(ctx context.Context, from time.Time, step time.Duration, n int) ([]int, error) {
	if n <= 0 || step <= 0 {
		return nil, nil
	}
	counts := make([]int, n)
	start := from.UnixNano()
	// binOf returns the step holding time at (Unix ns), or -1 outside the range.
	binOf := func(at int64) int {
		if at < start {
			return -1
		}
		// at >= start, so the unsigned difference is exact even where the signed one overflows.
		i := (uint64(at) - uint64(start)) / uint64(step)
		if i >= uint64(n) {
			return -1
		}
		return int(i)
	}

	q.mu.Lock()
	defer q.mu.Unlock()
	// Messages in memory: those of loaded slots, and retries.
	for _, b := range q.mem.buckets {
		if b.waiting > 0 {
			if i := binOf(b.key * bucketNs); i >= 0 {
				counts[i] += b.waiting
			}
		}
	}
	// Messages in the disk wheel: the slots after loaded, up to the horizon.
	w := &q.disk
	for slot := max(w.loaded+1, w.slotOf(start)); slot <= w.loaded+w.horizon(); slot++ {
		i := binOf(max(w.slotStart(slot), start))
		if i < 0 {
			break // past the range
		}
		counts[i] += int(w.peek(slot).due)
	}
	return counts, nil
}
