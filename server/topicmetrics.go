package server

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tockwheel/tock/queue"
)

// Per-topic metrics. A topic label costs a series per metric for as long as the process runs, so
// their number is bounded: the first topics the server meets (by a delivery, or in the engine's
// listing at a scrape) get a label of their own, up to the bound, and every other topic is counted
// under OtherTopic.

// OtherTopic is the topic label of the topics beyond the bound of [WithMetricsTopics], of topic
// names that are not valid in a request path (the Go API allows any), and of a topic named
// "other".
const OtherTopic = "other"

// DefaultMetricsTopics is how many topics /metrics labels by name unless [WithMetricsTopics]
// says otherwise.
const DefaultMetricsTopics = 100

// WithMetricsTopics bounds the topics /metrics labels by name to n: the first n topics the server
// meets keep a label of their own for as long as it runs, and every other is counted under
// topic="other" ([OtherTopic]). 0 counts every topic as other. [New] panics on a negative n. The
// default is [DefaultMetricsTopics].
func WithMetricsTopics(n int) Option { return func(c *config) { c.metricsTopics = &n } }

// topicLabels gives topics their label. Lookups of a topic that has one, and of any topic once
// the bound is reached, take no lock. It is safe for concurrent use.
type topicLabels struct {
	max      int
	lateness *prometheus.HistogramVec
	other    *topicSeries

	byName sync.Map // topic -> *topicSeries, at most max of them
	full   atomic.Bool

	mu sync.Mutex // held to add to byName
	n  int
}

// topicSeries is a label and the collectors the hot path writes under it.
type topicSeries struct {
	label    string
	lateness prometheus.Observer
}

func newTopicLabels(max int, lateness *prometheus.HistogramVec) *topicLabels {
	l := &topicLabels{max: max, lateness: lateness}
	l.other = &topicSeries{label: OtherTopic, lateness: lateness.WithLabelValues(OtherTopic)}
	l.full.Store(max == 0)
	return l
}

// of returns topic's series, giving it a label of its own if there is room.
func (l *topicLabels) of(topic string) *topicSeries {
	if v, ok := l.byName.Load(topic); ok {
		return v.(*topicSeries)
	}
	if l.full.Load() || topic == OtherTopic || !validName(topic) {
		// An invalid name may be anything the Go API took: not UTF-8, 64 KiB long.
		return l.other
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if v, ok := l.byName.Load(topic); ok {
		return v.(*topicSeries)
	}
	if l.n >= l.max {
		l.full.Store(true)
		return l.other
	}
	ts := &topicSeries{label: topic, lateness: l.lateness.WithLabelValues(topic)}
	l.byName.Store(topic, ts)
	l.n++
	return ts
}

// topicCounts are the counters of one topic, or of one label, and when the engine began them.
type topicCounts struct {
	puts, deliveries, acks, nacks uint64
	since                         time.Time
}

// topicGauges are the gauges of one label at one scrape.
type topicGauges struct {
	scheduled, due, leased, dead int64
	oldestDue                    time.Time
}

// topicCollector exports the engine's per-topic counts ([queue.Admin.Topics]) by label, listing
// the topics once per scrape. The engine's counters are its own (the whole deployment's for
// redisq, since Open for delayq) and a topic leaves the listing while it holds nothing; so that
// a label's counters only grow however its topics come and go, each exports what the counts of
// its topics grew by between the scrapes of this process, from their value when first listed.
// The counts of a topic are remembered while it is out of the listing (up to maxForgotten
// topics): a delayq topic with a Receive waiting, and every redisq topic, keeps counting from
// where it was; one the engine forgot comes back with a later CountsSince, counting from zero.
type topicCollector struct {
	admin  queue.Admin
	labels *topicLabels
	now    func() time.Time

	mu   sync.Mutex
	last map[string]topicCounts  // by topic: the counts at the last scrape that listed it
	acc  map[string]*topicCounts // by label: the growth so far
}

// maxForgotten bounds the topics out of the engine's listing whose counts a topicCollector
// remembers; beyond it, it forgets them all.
const maxForgotten = 10_000

var (
	topicPutsDesc = prometheus.NewDesc("tock_topic_puts_total",
		"Messages put on the topic, as the engine counts them (for redisq, the whole deployment's).", []string{"topic"}, nil)
	topicDeliveriesDesc = prometheus.NewDesc("tock_topic_deliveries_total",
		"Messages delivered from the topic, redeliveries included, as the engine counts them.", []string{"topic"}, nil)
	topicAcksDesc = prometheus.NewDesc("tock_topic_acks_total",
		"Messages of the topic acked, as the engine counts them.", []string{"topic"}, nil)
	topicNacksDesc = prometheus.NewDesc("tock_topic_nacks_total",
		"Leases of the topic's messages ended by a nack, as the engine counts them.", []string{"topic"}, nil)
	topicScheduledDesc = prometheus.NewDesc("tock_topic_scheduled_messages",
		"Messages of the topic waiting for their due time.", []string{"topic"}, nil)
	topicDueDesc = prometheus.NewDesc("tock_topic_due_messages",
		"Messages of the topic due and waiting for a consumer: its backlog.", []string{"topic"}, nil)
	topicLeasedDesc = prometheus.NewDesc("tock_topic_leased_messages",
		"Messages of the topic delivered and not yet acked, nacked or expired.", []string{"topic"}, nil)
	topicDeadDesc = prometheus.NewDesc("tock_topic_dead_messages",
		"Dead letters that died on the topic and wait on its dead-letter topic.", []string{"topic"}, nil)
	topicDueAgeDesc = prometheus.NewDesc("tock_topic_oldest_due_age_seconds",
		"How long the topic's oldest due message has been due (0 when none is): how far its consumers are behind.", []string{"topic"}, nil)
	topicDescs = []*prometheus.Desc{topicPutsDesc, topicDeliveriesDesc, topicAcksDesc, topicNacksDesc,
		topicScheduledDesc, topicDueDesc, topicLeasedDesc, topicDeadDesc, topicDueAgeDesc}
)

func (c *topicCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range topicDescs {
		ch <- d
	}
}

func (c *topicCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), scrapeTimeout)
	defer cancel()
	topics, err := c.admin.Topics(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(topicDueDesc, fmt.Errorf("engine topics: %w", err))
		return
	}
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	gauges := make(map[string]*topicGauges, len(c.acc))
	if c.last == nil || len(c.last) > len(topics)+maxForgotten {
		listed := make(map[string]topicCounts, len(topics))
		for _, t := range topics {
			if cur, ok := c.last[t.Topic]; ok {
				listed[t.Topic] = cur
			}
		}
		c.last = listed
	}
	for _, t := range topics {
		label := c.labels.of(t.Topic).label
		cur := topicCounts{puts: t.Puts, deliveries: t.Deliveries, acks: t.Acks, nacks: t.Nacks, since: t.CountsSince}
		prev := c.last[t.Topic]
		if !prev.since.Equal(cur.since) {
			prev = topicCounts{} // the engine counts them from zero again
		}
		c.last[t.Topic] = cur
		a := c.acc[label]
		if a == nil {
			a = &topicCounts{}
			c.acc[label] = a
		}
		a.puts += growth(prev.puts, cur.puts)
		a.deliveries += growth(prev.deliveries, cur.deliveries)
		a.acks += growth(prev.acks, cur.acks)
		a.nacks += growth(prev.nacks, cur.nacks)
		g := gauges[label]
		if g == nil {
			g = &topicGauges{}
			gauges[label] = g
		}
		g.scheduled += t.Scheduled
		g.due += t.Due
		g.leased += t.Leased
		g.dead += t.Dead
		if !t.OldestDue.IsZero() && (g.oldestDue.IsZero() || t.OldestDue.Before(g.oldestDue)) {
			g.oldestDue = t.OldestDue
		}
	}
	// A label whose topics left the listing stays, its gauges at zero.
	for label, a := range c.acc {
		g := gauges[label]
		if g == nil {
			g = &topicGauges{}
		}
		var age float64
		if !g.oldestDue.IsZero() {
			age = max(seconds(now.Sub(g.oldestDue)), 0)
		}
		for _, m := range []struct {
			d *prometheus.Desc
			t prometheus.ValueType
			v float64
		}{
			{topicPutsDesc, prometheus.CounterValue, float64(a.puts)},
			{topicDeliveriesDesc, prometheus.CounterValue, float64(a.deliveries)},
			{topicAcksDesc, prometheus.CounterValue, float64(a.acks)},
			{topicNacksDesc, prometheus.CounterValue, float64(a.nacks)},
			{topicScheduledDesc, prometheus.GaugeValue, float64(g.scheduled)},
			{topicDueDesc, prometheus.GaugeValue, float64(g.due)},
			{topicLeasedDesc, prometheus.GaugeValue, float64(g.leased)},
			{topicDeadDesc, prometheus.GaugeValue, float64(g.dead)},
			{topicDueAgeDesc, prometheus.GaugeValue, age},
		} {
			ch <- prometheus.MustNewConstMetric(m.d, m.t, m.v, label)
		}
	}
}

// growth is how much a counter read as prev and then cur grew: all of cur when it went back (a
// Redis that lost its data).
func growth(prev, cur uint64) uint64 {
	if cur < prev {
		return cur
	}
	return cur - prev
}
