package server

import (
	"sync"
	"time"

	"github.com/tockwheel/tock/api"
	"github.com/tockwheel/tock/queue"
)

// Sampling of the engine's per-topic counts, for the rates of GET /v1/topics. The server has no
// goroutine of its own: it samples when the topics are asked for, keeping at most rateSamples
// samples a topic, at least rateSpacing apart, so that the oldest it keeps is about rateWindow old
// when someone watches (the status page asks every few seconds).
const (
	rateWindow  = time.Minute
	rateSpacing = 2 * time.Second
	rateSamples = int(rateWindow/rateSpacing) + 1
)

// A rateSample is a topic's counts at one time.
type rateSample struct {
	at                     time.Time
	puts, deliveries, acks uint64
}

// topicSamples is a ring of a topic's samples, oldest first from start.
type topicSamples struct {
	ring  [rateSamples]rateSample
	start int
	n     int
}

func (ts *topicSamples) at(i int) *rateSample { return &ts.ring[(ts.start+i)%rateSamples] }

func (ts *topicSamples) push(s rateSample) {
	if ts.n == rateSamples {
		ts.ring[ts.start] = s
		ts.start = (ts.start + 1) % rateSamples
		return
	}
	*ts.at(ts.n) = s
	ts.n++
}

// rates samples the counts of the topics. Its memory is bounded by the number of topics the
// engine lists: a topic missing from a listing is forgotten. It is safe for concurrent use.
type rates struct {
	mu     sync.Mutex
	topics map[string]*topicSamples
}

// sample records the counts of topics at now and returns the rate of each, in order.
func (r *rates) sample(now time.Time, topics []queue.TopicInfo) []api.Rate {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.topics == nil {
		r.topics = map[string]*topicSamples{}
	}
	seen := make(map[string]bool, len(topics))
	out := make([]api.Rate, len(topics))
	for i, t := range topics {
		seen[t.Topic] = true
		cur := rateSample{at: now, puts: t.Puts, deliveries: t.Deliveries, acks: t.Acks}
		ts := r.topics[t.Topic]
		if ts == nil {
			ts = &topicSamples{}
			r.topics[t.Topic] = ts
		}
		if ts.n > 0 {
			last := ts.at(ts.n - 1)
			if cur.puts < last.puts || cur.deliveries < last.deliveries || cur.acks < last.acks || now.Before(last.at) {
				// The engine restarted its counts (or the clock went back): what was
				// sampled says nothing of the counts now.
				*ts = topicSamples{}
			}
		}
		out[i] = ts.rate(cur)
		if ts.n == 0 || now.Sub(ts.at(ts.n-1).at) >= rateSpacing {
			ts.push(cur)
		}
	}
	for name := range r.topics {
		if !seen[name] {
			delete(r.topics, name)
		}
	}
	return out
}

// rate returns the growth from the oldest sample of the last rateWindow (or, when every sample
// is older, the newest) to cur, per second.
func (ts *topicSamples) rate(cur rateSample) api.Rate {
	var base *rateSample
	for i := 0; i < ts.n; i++ {
		s := ts.at(i)
		base = s
		if cur.at.Sub(s.at) <= rateWindow {
			break
		}
	}
	if base == nil {
		return api.Rate{}
	}
	secs := cur.at.Sub(base.at).Seconds()
	if secs <= 0 {
		return api.Rate{}
	}
	return api.Rate{
		Puts:       float64(cur.puts-base.puts) / secs,
		Deliveries: float64(cur.deliveries-base.deliveries) / secs,
		Acks:       float64(cur.acks-base.acks) / secs,
	}
}
