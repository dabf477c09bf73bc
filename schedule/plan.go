package schedule

import (
	"time"

	"github.com/tockwheel/tock/queue"
)

// maxTime is the last nominal time a schedule fires at: messages are not due later.
var maxTime = queue.MaxDeliverAt()

// countLimit bounds how many missed times a plan counts: past it, Plan.Missed says "at least".
const countLimit = 1_000_000

// A Plan is what an engine does for a schedule at one moment: which nominal times it fires now,
// how many it passes over, and where the schedule stands after.
type Plan struct {
	// Fire lists the nominal times to fire now, earliest first. Each fire's message is due at its
	// nominal time: at once for those that passed, and later for the one put ahead
	// (OverlapAllow).
	Fire []time.Time
	// Missed counts the nominal times passed over by the misfire policy (up to a million).
	Missed int
	// Next is the first nominal time left undecided, which the engine records with the fires;
	// zero when the schedule has no time left before queue.MaxDeliverAt.
	Next time.Time
	// Act is when the engine must plan again: when the fire put ahead falls due (OverlapAllow),
	// or at Next (OverlapSkip); zero when never.
	Act time.Time
}

// Plan decides, at now, the fires of a schedule whose first undecided nominal time is next (the
// engine's record; the first time after the schedule was set or resumed, to begin with). The
// times from next to now have come: the misfire policy says which of them fire (one that came
// within queue.MisfireGrace is on time under every policy). Under OverlapAllow the first time
// after now is fired too, ahead of its time, so that it is due as punctually as any message; under
// OverlapSkip the engine fires each time when it comes, and fires nothing while the schedule's
// previous fire waits (which Plan cannot see: the engine checks it, atomically with the fires).
// An empty misfire or overlap policy is the default one.
func (s *Spec) Plan(next, now time.Time, misfire queue.Misfire, overlap queue.Overlap) Plan {
	var p Plan
	if !next.IsZero() && !next.After(now) {
		keep := 1
		if misfire == queue.MisfireAll {
			keep = queue.MaxCatchUp
		}
		late, n := s.tail(next, now, keep)
		last := late[len(late)-1]
		switch misfire {
		case queue.MisfireSkip:
			if now.Sub(last) <= queue.MisfireGrace {
				p.Fire = []time.Time{last}
			}
		case queue.MisfireAll:
			p.Fire = late
		default:
			p.Fire = []time.Time{last}
		}
		p.Missed = n - len(p.Fire)
	}
	if next.IsZero() || next.After(now) {
		if !next.IsZero() && overlap != queue.OverlapSkip {
			p.Fire = append(p.Fire, next)
			p.Next = s.Next(next)
			p.Act = next
			return p
		}
		p.Next = next
		p.Act = next
		return p
	}
	ahead := s.Next(now)
	if overlap == queue.OverlapSkip {
		p.Next, p.Act = ahead, ahead
		return p
	}
	if !ahead.IsZero() {
		p.Fire = append(p.Fire, ahead)
		p.Next = s.Next(ahead)
	}
	p.Act = ahead
	return p
}

// tail returns the last (up to) k nominal times from next to now, both included, and how many
// there are (counted up to countLimit). next must be a nominal time not after now.
func (s *Spec) tail(next, now time.Time, k int) ([]time.Time, int) {
	if s.every > 0 {
		n := now.Sub(next)/s.every + 1
		kk := min(int64(n), int64(k))
		ts := make([]time.Time, kk)
		last := next.Add((n - 1) * s.every)
		for i := range ts {
			ts[i] = last.Add(-time.Duration(int64(len(ts)-1-i)) * s.every)
		}
		return ts, int(min(int64(n), countLimit))
	}
	// Count from next forward, keeping the last k, until now or the count limit.
	ring := make([]time.Time, 0, k)
	n := 0
	for t := next; !t.IsZero() && !t.After(now); t = s.Next(t) {
		if len(ring) == k {
			copy(ring, ring[1:])
			ring = ring[:k-1]
		}
		ring = append(ring, t)
		n++
		if n == countLimit {
			break
		}
	}
	if n < countLimit {
		return ring, n
	}
	// Too many to walk: find the last k by walking forward from ever earlier points before now.
	for span := time.Hour; ; span *= 2 {
		from := now.Add(-span)
		if !from.After(next) {
			from = next.Add(-time.Nanosecond)
		}
		var ts []time.Time
		for t := s.Next(from); !t.IsZero() && !t.After(now); t = s.Next(t) {
			ts = append(ts, t)
			if len(ts) > countLimit {
				ts = ts[len(ts)-k:]
			}
		}
		if len(ts) >= k || !from.After(next) {
			return ts[max(0, len(ts)-k):], n
		}
	}
}
